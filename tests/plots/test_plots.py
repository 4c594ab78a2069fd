"""Run plots: six views written as PNG and HTML, deterministic, reproduced by `srl-plot`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from simrl.cli.main import cli as srl_cli
from simrl.cli.plot import cli as plot_cli
from simrl.cli.psrl_plot import cli as psrl_cli
from simrl.plots import PLOT_NAMES, write_realrun_plots
from simrl.plots.data import downsample
from simrl.realrun import read_realrun

DATA = Path(__file__).parents[1] / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def plotted_run(tmp_path_factory):
    """A small simulated run with plots (the default scenario, 2 steps), made once per module."""
    out = tmp_path_factory.mktemp("runs")
    res = CliRunner().invoke(srl_cli, [f"run.output_dir={out}", "run.name=small", "run.training_steps=2", "--quiet",
                                        "--png"])
    assert res.exit_code == 0, res.output
    return out / "small"


def _files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run_dir / "plots").iterdir())}


def test_run_writes_six_plots_as_png_and_html(plotted_run):
    files = _files(plotted_run)
    assert sorted(files) == sorted([f"{n}.png" for n in PLOT_NAMES] + [f"{n}.html" for n in PLOT_NAMES])
    for n in PLOT_NAMES:
        assert files[f"{n}.png"].startswith(PNG_MAGIC) and len(files[f"{n}.png"]) > 10_000
        assert b"vega" in files[f"{n}.html"]
    assert not [p for p in (plotted_run / "plots").iterdir() if p.name.startswith(".")]  # no temp files left


def test_report_md_embeds_the_plots(plotted_run):
    md = (plotted_run / "report.md").read_text()
    for n in PLOT_NAMES:
        assert f"](plots/{n}.png)" in md
    assert "## Cost-model validity" in md


def test_srl_plot_reproduces_the_run_plots_byte_identically(plotted_run, tmp_path):
    before = _files(plotted_run)
    copy = tmp_path / "copy"
    shutil.copytree(plotted_run, copy)
    shutil.rmtree(copy / "plots")
    res = CliRunner().invoke(plot_cli, [str(copy)])
    assert res.exit_code == 0, res.output
    assert f"{2 * len(PLOT_NAMES)} files" in res.output
    assert _files(copy) == before  # byte for byte, PNG included


def test_srl_plot_exports_the_run_as_a_real_run(plotted_run, tmp_path):
    out = tmp_path / "run.realrun.jsonl"
    res = CliRunner().invoke(plot_cli, [str(plotted_run), "--export-realrun", str(out)])
    assert res.exit_code == 0, res.output
    run = read_realrun(out)
    assert [s.step for s in run.steps] == [1, 2]


def test_srl_plot_names_a_missing_or_corrupt_file(plotted_run, tmp_path):
    res = CliRunner().invoke(plot_cli, [str(tmp_path)])
    assert res.exit_code == 2 and "report.json: missing" in res.output
    copy = tmp_path / "copy"
    shutil.copytree(plotted_run, copy)
    tele = copy / "telemetry.jsonl"
    lines = tele.read_text().splitlines()
    lines[3] = lines[3][:10]
    tele.write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(plot_cli, [str(copy)])
    assert res.exit_code == 2 and "telemetry.jsonl:4: corrupt" in res.output
    (copy / "report.json").write_text("{not json")
    res = CliRunner().invoke(plot_cli, [str(copy)])
    assert res.exit_code == 2 and "report.json:1: corrupt" in res.output
    (copy / "report.json").unlink()
    (copy / "telemetry.jsonl").unlink()
    res = CliRunner().invoke(plot_cli, [str(copy)])
    assert res.exit_code == 2 and "report.json: missing" in res.output and "Traceback" not in res.output


def test_downsample_keeps_extremes_and_the_carried_value():
    pts = [(i * 0.01, (i * 37) % 101) for i in range(20_000)] + [(200.0, 7)]
    out = downsample(pts, 200.0, n=50)
    assert len(out) <= 4 * 50 + 1
    assert out == sorted(out) and out[-1] == (200.0, 7)
    assert max(v for _, v in out) == 100 and min(v for _, v in out) == 0
    assert downsample(pts, 200.0, n=50) == out  # deterministic
    # Same instant: the last value holds; a flat tail keeps its end point.
    assert downsample([(0, 5), (0, 0), (3, 0)], 3) == [(0, 0), (3, 0)]


def test_real_run_plots_skip_what_the_data_cannot_show(tmp_path):
    run = read_realrun(DATA / "real_run_sample.jsonl")
    paths, skipped = write_realrun_plots(run, tmp_path, title="sample")
    names = {p.stem for p in paths}
    assert names == {"instance_load", "timeline", "throughput", "step_breakdown"}
    assert set(skipped) == {"staleness", "distributions", "queue_depth"}


def test_srl_psrl_plot_converts_and_plots(tmp_path):
    res = CliRunner().invoke(psrl_cli, [str(DATA / "psrl_sample.log"), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "converted 3 steps" in res.output and "skipped distributions:" in res.output
    assert read_realrun(tmp_path / "out" / "realrun.jsonl").system == "psrl"
    assert (tmp_path / "out" / "plots" / "throughput.png").read_bytes().startswith(PNG_MAGIC)
    res = CliRunner().invoke(psrl_cli, [str(tmp_path / "nope.log"), "-o", str(tmp_path / "x")])
    assert res.exit_code == 2 and "nope.log: cannot read" in res.output


def test_import_simrl_does_not_import_altair():
    code = "import sys, simrl, simrl.output, simrl.plots, simrl.realrun, simrl.compare; " \
           "assert 'altair' not in sys.modules and 'vl_convert' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_router_queue_series_counts_arrivals_between_samples_and_ends_at_the_report():
    from simrl.plots.data import router_queue_series

    samples = [{"t": 1.0, "router_queue": 0}, {"t": 5.0, "router_queue": 1}]
    events = [{"t": 2.0, "kind": "call_arrive"}, {"t": 3.0, "kind": "call_arrive"},
              {"t": 3.0, "kind": "preempt"}, {"t": 6.0, "kind": "call_arrive"}]
    # 0 at t=1; +1 at 2 and 3 (no sample while every instance was paused); the sample at 5 says 1;
    # +1 at 6; the report says 4 were queued when the run ended at 9
    assert router_queue_series(samples, events, 4, 9.0) == ((1.0, 0), (2.0, 1), (3.0, 2), (5.0, 1), (6.0, 2), (9.0, 4))
    # an arrival and a sample at one instant: the arrival first (the engine logs it, then routes)
    assert router_queue_series([{"t": 2.0, "router_queue": 0}], [{"t": 2.0, "kind": "call_arrive"}], None, 3.0) \
        == ((2.0, 1), (2.0, 0))


def test_timeline_marks_aborts_and_preemptions_and_counts_use_integer_ticks():
    import json

    from simrl.plots import charts
    from simrl.plots.data import PlotData, StepView, event_markers
    from simrl.plots.render import spec_json

    events = [{"t": 1.0, "kind": "preempt", "inst": 0}, {"t": 1.001, "kind": "preempt", "inst": 0},
              {"t": 4.0, "kind": "abort", "inst": 1}, {"t": 4.0, "kind": "call_finish", "inst": 1}]
    d = PlotData(title="t", steps=(StepView(1, 0.0, 3.0, 4.0, 5.0, 10, 10),), train_bands=((3.0, 4.0),),
                 instances=2, markers=event_markers(events),
                 load=((0.0, 0, 1, 0, 10, 0), (0.0, 1, 1, 0, 10, 0), (5.0, 0, 0, 0, 0, 0), (5.0, 1, 0, 0, 0, 0)))
    assert d.markers == ((0, 1.0, "preemption"), (0, 1.001, "preemption"), (1, 4.0, "abort"))
    ds = charts.Datasets()
    spec = json.loads(spec_json(charts.timeline(ds, d), ds.values))
    rows = [r for v in spec["datasets"].values() for r in v if "event" in r]
    # the two preemptions 1 ms apart share one marker (400 buckets over 5 s: 12.5 ms each)
    assert rows == [{"lane": "instance 0", "t": 1.0, "event": "preemption", "count": 2},
                    {"lane": "instance 1", "t": 4.0, "event": "abort", "count": 1}]
    assert "1 aborts, 2 preemptions" in json.dumps(spec["title"])
    ds = charts.Datasets()
    load = json.dumps(json.loads(spec_json(charts.instance_load(ds, d), ds.values)))
    assert load.count('"tickMinStep": 1') >= 2 and '"format": "d"' in load
