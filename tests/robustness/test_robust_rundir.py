"""`srl-plot RUN_DIR`: a run directory's report.json and telemetry.jsonl read back.

A repeated key (one value silently dropped), nesting too deep (a RecursionError traceback), and
a telemetry time that is not a finite number (plotted silently) are exit 2 naming the file and
line, and no plot is written. NaN stays readable in report.json: the run writes it for an
undefined metric.
"""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner
from robust_common import check_clean_error
from robust_common import small_run as make_small_run

from simrl.cli.plot import cli as plot_cli


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    return make_small_run(tmp_path_factory.mktemp("runs"), steps=1)


def _sub(name, old, new):
    def edit(d):
        p = d / name
        data = p.read_bytes()
        assert old in data
        p.write_bytes(data.replace(old, new, 1))
    return edit


CASES = [
    ("report_dup_key", _sub("report.json", b"{", b'{"schema": "simrl.report.v0",'), ["report.json", "duplicate key"]),
    ("report_deep", lambda d: (d / "report.json").write_text("[" * 100000 + "]" * 100000),
     ["report.json", "nested too deeply"]),
    ("telemetry_dup_key", _sub("telemetry.jsonl", b'{"epoch":0,', b'{"epoch":0,"epoch":1,'),
     ["telemetry.jsonl:2", "duplicate key 'epoch'"]),
    ("telemetry_deep", lambda d: (d / "telemetry.jsonl").open("a").write("[" * 100000 + "]" * 100000 + "\n"),
     ["telemetry.jsonl:", "nested too deeply"]),
    ("telemetry_t_nan", _sub("telemetry.jsonl", b'"t":0,', b'"t":NaN,'), ["telemetry.jsonl:2", "'t'", "finite"]),
    ("telemetry_t_string", _sub("telemetry.jsonl", b'"t":0,', b'"t":"0",'), ["telemetry.jsonl:2", "'t'"]),
    ("telemetry_kind_int", _sub("telemetry.jsonl", b'"kind":"group_dispatch"', b'"kind":3'),
     ["telemetry.jsonl:2", "'kind'"]),
]


@pytest.mark.parametrize("name, edit, expect", CASES, ids=[c[0] for c in CASES])
def test_corrupt_run_dir_is_a_clean_error(small_run, tmp_path, name, edit, expect):
    d = tmp_path / "run"
    shutil.copytree(small_run, d)
    edit(d)
    res = CliRunner().invoke(plot_cli, [str(d)])
    check_clean_error(res, [f"{d}/{e}" if e.startswith(("report", "telemetry")) else e for e in expect], name)
    assert not (d / "plots").exists()
