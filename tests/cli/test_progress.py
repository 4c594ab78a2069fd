"""The progress display: its text, when it is silent, and the plain fallback without rich."""

from __future__ import annotations

import io
import math
import sys
import time

from click.testing import CliRunner

from simrl.cli import progress
from simrl.cli.main import cli as srl_cli


def test_describe_reports_the_nearer_bound():
    # 30 of 60 simulated seconds is 0.5; 1 of 4 steps is 0.25: the run ends at whichever comes first
    assert progress.describe(30.0, 60.0, 1, 4) == ("30.0 / 60.0 s simulated, 1/4 steps", 0.5)
    # no horizon (inf): only the steps bound, 3/4 = 0.75
    assert progress.describe(12.25, math.inf, 3, 4) == ("12.2 s simulated, 3/4 steps", 0.75)
    text, frac = progress.describe(5.0, math.inf, 2, 0)
    assert text == "5.0 s simulated, 2 steps" and frac is None


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_silent_when_not_a_terminal_or_quiet():
    pipe = io.StringIO()
    with progress.watch(lambda: ("x", 0.5), "simulating", stream=pipe, delay_s=0, refresh_s=0.01):
        time.sleep(0.05)
    assert pipe.getvalue() == ""
    from simrl.cli.app import state

    state.quiet = True
    try:
        tty = _Tty()
        with progress.watch(lambda: ("x", 0.5), "simulating", stream=tty, delay_s=0, refresh_s=0.01):
            time.sleep(0.05)
        assert tty.getvalue() == ""
    finally:
        state.quiet = False


def test_plain_line_without_rich(monkeypatch):
    monkeypatch.setitem(sys.modules, "rich.progress", None)  # `from rich.progress import ...` fails
    tty = _Tty()
    with progress.watch(lambda: ("30.0 / 60.0 s simulated, 1/4 steps", 0.5), "simulating", stream=tty,
                        delay_s=0, refresh_s=0.01):
        time.sleep(0.05)
    out = tty.getvalue()
    assert "\rsimulating: 30.0 / 60.0 s simulated, 1/4 steps (50%), 0 s" in out
    assert out.endswith("\r")  # the line is cleared when the command ends


def test_nothing_shown_for_a_command_shorter_than_the_delay():
    tty = _Tty()
    with progress.watch(lambda: ("x", 0.5), "simulating", stream=tty, delay_s=5):
        pass
    assert tty.getvalue() == ""


def test_srl_with_a_progress_display_writes_the_same_files(tmp_path, monkeypatch):
    """The display only reads the simulation: the run's files are byte-identical with it on."""
    args = ["run.training_steps=1", "run.plots=false", "-q", f"run.output_dir={tmp_path / 'out'}"]
    res = CliRunner().invoke(srl_cli, args)
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "out").iterdir()
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "enabled", lambda stream=None: True)
    res = CliRunner().invoke(srl_cli, args)
    assert res.exit_code == 0, res.output
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
