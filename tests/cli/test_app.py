"""The shared CLI app: one style across the commands, staged run directories, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from simrl.atomic import staged_dir
from simrl.cli.app import AppCommand, common_options, info, warn
from simrl.cli.compare import cli as compare_cli
from simrl.cli.main import cli as srl_cli
from simrl.cli.plot import cli as plot_cli
from simrl.cli.psrl_plot import cli as psrl_cli
from simrl.cli.regress import cli as regress_cli
from simrl.cli.workload import main as workload_cli

ROOT = Path(__file__).resolve().parents[2]

# Every command of every CLI the app serves: it must accept -h, -q and -v.
COMMANDS = [
    (srl_cli, ["run"]), (srl_cli, ["step"]), (srl_cli, ["config"]), (srl_cli, ["presets"]),
    (regress_cli, ["fit"]), (regress_cli, ["eval"]), (regress_cli, ["show"]),
    (plot_cli, []), (compare_cli, []), (psrl_cli, []),
    (workload_cli, ["list"]), (workload_cli, ["synth"]), (workload_cli, ["validate"]), (workload_cli, ["stats"]),
    (workload_cli, ["import", "splitwise"]), (workload_cli, ["collect"]),
]


@pytest.mark.parametrize("cli, sub", COMMANDS, ids=[" ".join([c.name or "", *s]) for c, s in COMMANDS])
def test_every_command_has_the_common_options(cli, sub):
    res = CliRunner().invoke(cli, [*sub, "-h"])
    assert res.exit_code == 0, res.output
    for opt in ("-q, --quiet", "-v, --verbose", "-h, --help"):
        assert opt in res.output, (sub, opt, res.output)


WRITERS = [(regress_cli, ["fit"]), (plot_cli, []), (compare_cli, []), (psrl_cli, []), (srl_cli, ["run"]),
           (workload_cli, ["synth"]), (workload_cli, ["import", "splitwise"]), (workload_cli, ["collect"]),
           (workload_cli, ["stats"])]


@pytest.mark.parametrize("cli, sub", WRITERS, ids=[" ".join([c.name or "", *s]) for c, s in WRITERS])
def test_every_writer_has_dash_o_and_json(cli, sub):
    out = CliRunner().invoke(cli, [*sub, "--help"]).output
    assert "-o, --output" in out and "--json" in out, out


def test_usage_errors_exit_2_and_name_the_option():
    res = CliRunner().invoke(workload_cli, ["synth", "rl_math", "--groups", "x", "-o", "t.jsonl"])
    assert res.exit_code == 2 and "--groups" in res.output


def test_srl_json_quiet_and_rerun_replaces_the_run_directory(tmp_path):
    args = ["-o", str(tmp_path), "run.name=r", "run.training_steps=1", "workload.groups=8", "run.plots=false"]
    res = CliRunner().invoke(srl_cli, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    run = Path(doc["run_dir"])
    assert run == tmp_path / "r" and doc["totals"]["training_steps"] == 1
    stale = run / "plots" / "stale-from-an-older-run.png"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"old")
    res = CliRunner().invoke(srl_cli, [*args, "run.telemetry=false", "-q"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"run directory: {run}"  # -q: only the result line
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "report.json", "report.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no staging or old directories left


def test_staged_dir_removes_its_temporary_directory_on_failure(tmp_path):
    final = tmp_path / "run"
    final.mkdir()
    (final / "report.json").write_text("previous")
    with pytest.raises(RuntimeError), staged_dir(final) as tmp:
        (tmp / "report.json").write_text("half")
        raise RuntimeError("boom")
    assert (final / "report.json").read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_output_checked_before_work(tmp_path):
    afile = tmp_path / "f"
    afile.write_text("x")
    t0 = time.perf_counter()
    res = CliRunner().invoke(srl_cli, [f"run.output_dir={afile}/sub", "run.training_steps=50"])
    assert res.exit_code == 2 and "not a directory" in res.output
    assert time.perf_counter() - t0 < 5  # refused up front, not after a 50-step simulation


def test_warnings_go_through_the_warning_channel():
    @click.command(cls=AppCommand)
    @common_options
    def cmd():
        warnings.simplefilter("always")  # Python shows one warning per location by default
        warnings.warn("outside the validity domain", UserWarning, stacklevel=1)
        info("normal output")

    with warnings.catch_warnings():
        res = CliRunner().invoke(cmd, [])
        quiet = CliRunner().invoke(cmd, ["-q"])
    assert res.exit_code == 0
    assert "warning: outside the validity domain" in res.output and "UserWarning" not in res.output
    res = quiet
    assert "normal output" not in res.output and "warning:" in res.output
    warn("direct")  # usable outside a command too


def test_step_help_and_quit():
    res = CliRunner().invoke(srl_cli, ["step", "--help"])
    assert "q, quit" in res.output and "help" in res.output
    res = CliRunner().invoke(srl_cli, ["step", "--do", "s 1; help; q; s 5"])
    assert res.exit_code == 0 and "commands:" in res.output
    assert res.output.count("t = ") == 1  # `q` quit before `s 5`
    res = CliRunner().invoke(srl_cli, ["step"], input="qu\nquit\n")
    assert res.exit_code == 0 and "router queue" in res.output


def test_policy_name_in_yaml(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("policy: sync\n")
    res = CliRunner().invoke(srl_cli, ["config", "--config", str(cfg), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["policy"]["kind"] == "sync"


def test_shell_completion():
    res = CliRunner().invoke(srl_cli, [], prog_name="srl", env={"_SRL_COMPLETE": "bash_source"})
    assert res.exit_code == 0 and "_SRL_COMPLETE=bash_complete" in res.output


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_leaves_no_temporary_files(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", "from simrl.cli.main import main; main()",
                             "-o", str(tmp_path), "run.training_steps=400", "run.name=t"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(3.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err.decode()
    assert "terminated" in err.decode() and "Traceback" not in err.decode()
    assert list(tmp_path.rglob("*")) == []


@pytest.mark.parametrize("cli, sub", [(c, s) for c, s in COMMANDS if s],
                         ids=[" ".join([c.name or "", *s]) for c, s in COMMANDS if s])
def test_h_survives_a_subcommand_shown_on_its_own_first(cli, sub):
    # click builds a command's help option once, from the first context it sees: a subcommand first shown
    # without its group (a docs generator, tests/test_docs_commands.py) kept only --help for every later call
    cmd = cli
    for name in sub:
        cmd = cmd.commands[name]
    assert CliRunner().invoke(cmd, ["--help"]).exit_code == 0
    res = CliRunner().invoke(cli, [*sub, "-h"])
    assert res.exit_code == 0 and "-h, --help" in res.output, res.output


def _scripts():
    import importlib
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, target in sorted(scripts.items()):
        mod = importlib.import_module(target.split(":")[0])
        root = getattr(mod, "cli", None)
        if not isinstance(root, click.Command):
            root = getattr(mod, target.split(":")[1])
        assert isinstance(root, click.Command), (name, target)
        yield name, root


def _leaves(cmd, path=()):
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _leaves(sub, (*path, name))
    elif path:
        yield path, cmd


@pytest.mark.parametrize("script, root", list(_scripts()), ids=[n for n, _ in _scripts()])
def test_h_survives_on_every_nested_subcommand_of_every_script(script, root):
    # the class of the bug above, on every console script at any depth: `srl-profile import vidur -h` failed
    # in CI when `import vidur` had been shown alone first (a nested group made by `@cli.group()`)
    for path, leaf in _leaves(root):
        assert CliRunner().invoke(leaf, ["--help"]).exit_code == 0, (script, path)
        res = CliRunner().invoke(root, [*path, "-h"])
        assert res.exit_code == 0 and "-h, --help" in res.output, (script, path, res.output)
