"""examples/simulate/psrl_vs_verl.sh answers the headline question; the answer must not silently rot.

The quick variant (5 steps, no PNG; ~10 s of CPU) runs in CI: it checks that the two deployments
are what they are called (binding limits), the structural answer it prints (PSRL waits on its
slowest reserved group while full buffers of finished groups sit behind it; verl's FIFO queue
never makes its trainer wait with a batch queued and does not fill), and cross-checks the plot's
series against the engine's own queue depth. The full-size run (`-m slow`) must reproduce the
checked-in examples/simulate/psrl_vs_verl.md byte for byte.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples/simulate/psrl_vs_verl.sh"


def _run(out: Path, *args: str) -> subprocess.CompletedProcess:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    bindir = Path(sys.executable).parent
    env = {**os.environ, "SRL": str(bindir / "srl"), "PYTHON": sys.executable}
    if not (bindir / "srl").exists():
        pytest.skip("the srl console script is not installed beside this python")
    res = subprocess.run(["bash", str(SCRIPT), str(out), *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res


def _load(out: Path, dep: str, preset: str):
    d = out / dep / preset
    report = json.loads((d / "report.json").read_text(encoding="utf-8"))
    events = [json.loads(x) for x in (d / "telemetry.jsonl").read_text(encoding="utf-8").splitlines()[1:]]
    return report, events


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("psrl_vs_verl")
    res = _run(out, "--quick")
    return out, res.stdout


def test_the_two_deployments_are_rollout_bound_and_trainer_bound(quick):
    out, _ = quick
    rb, _ = _load(out, "rollout_bound", "verl")
    tb, _ = _load(out, "trainer_bound", "verl")
    steps = len(rb["steps"])
    assert rb["totals"]["binding_limit_steps"]["rollout"] == steps
    assert tb["totals"]["binding_limit_steps"]["training"] > steps // 2
    assert tb["totals"]["trainer_busy_fraction"] > 2 * rb["totals"]["trainer_busy_fraction"]
    # the same batch for both presets, and PSRL's bound held by construction
    for dep in ("rollout_bound", "trainer_bound"):
        p, _ = _load(out, dep, "psrl")
        v, _ = _load(out, dep, "verl")
        assert {s["groups"] for s in p["steps"]} == {s["groups"] for s in v["steps"]} == {32}
        assert p["totals"]["staleness_max"] <= 2
        assert v["totals"]["staleness_bound"] is None  # verl fully_async: no per-sample bound


def test_the_printed_answer(quick):
    out, stdout = quick
    assert stdout.count("PSRL latency-bound? yes") == 2
    assert stdout.count("verl's overage queue fills up? no") == 2
    assert "the answer is the same in both" in stdout
    md = (out / "psrl_vs_verl.md").read_text(encoding="utf-8")
    assert md.split("## Deployments")[0].strip() in stdout
    assert (out / "psrl_vs_verl.html").exists() and not (out / "psrl_vs_verl.png").exists()  # --quick: no PNG


def test_psrl_waits_on_a_straggler_while_later_buffers_fill_and_verl_never_does(quick):
    from simrl.plots.batches import step_rows

    out, _ = quick
    for dep in ("rollout_bound", "trainer_bound"):
        rows = step_rows(*_load(out, dep, "psrl"), batch_groups=32)
        waited = [r for r in rows if r["straggler_wait_s"] > 0]
        assert waited, dep
        # at least once a whole later buffer (32 groups) was finished while the trainer waited
        # for the last group of its next one, and that group had been generating longer than
        # the wait itself
        worst = max(waited, key=lambda r: r["straggler_wait_s"])
        assert worst["later_queued_at_ready"] >= 32
        assert worst["slowest_latency_s"] > worst["wait_s"] > 0
        vrows = step_rows(*_load(out, dep, "verl"), batch_groups=32)
        assert all(r["straggler_wait_s"] == 0.0 for r in vrows)  # FIFO: a queued batch is taken at once
        assert max(r["later_queued_at_ready"] for r in vrows) < (96 - 32) / 2  # never half full


def test_the_plot_series_agree_with_the_engines_queue_depth(quick):
    # The plot's finished-and-untrained groups (next batch's finished + later ones) must equal
    # the engine's own buffered count (report.json queue_depth, recorded by LimitClock) at every
    # change of either, in all four runs (no group is evicted in them).
    from simrl.plots.batches import batch_series

    out, _ = quick
    for dep in ("rollout_bound", "trainer_bound"):
        for preset in ("psrl", "verl"):
            report, events = _load(out, dep, preset)
            series = batch_series(report, events)
            depth = report["queue_depth"]
            times = sorted({r[0] for r in series} | {d[0] for d in depth})
            for t in times:
                ours = [r for r in series if r[0] <= t][-1]
                eng = [d for d in depth if d[0] <= t][-1]
                assert ours[2] + ours[3] == pytest.approx(eng[2], abs=0), (dep, preset, t)


@pytest.mark.slow
def test_full_run_reproduces_the_checked_in_answer(tmp_path):
    _run(tmp_path)
    assert (tmp_path / "psrl_vs_verl.md").read_text(encoding="utf-8") == (
        ROOT / "examples/simulate/psrl_vs_verl.md").read_text(encoding="utf-8")
