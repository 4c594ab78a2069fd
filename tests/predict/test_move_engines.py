"""The move-engines question: the load-spike snapshot, the paired stall rule, the report, and
the checked-in example (examples/predict/move_engines.sh --quick)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from predict_helpers import small_cfg
from simhelpers import linear_costs

from simrl.cli.predict import main as predict_cli
from simrl.predict import MoveStudy, Prediction, move_engines, spike_snapshot
from simrl.snapshot import SnapshotError, write_snapshot

ROOT = Path(__file__).resolve().parents[2]


def pred(ready, free=100.0, reshard=0.0):
    return Prediction(label="x", t0=100.0, draws=len(ready), trainer_free_s=free, reshard_s=reshard,
                      batch_times=tuple((r,) for r in ready), request_finish={})


def test_stall_rule_is_paired_by_draw():
    # Three draws. As is: ready at +10, +20, +40 s. k=1: each draw 0.5 s later -> delays 0.5 (on time
    # at 1 s tolerance). k=2: the trainer reshards until +15 s and the batch is 2 s later:
    # starts max(12, 15)=15, 22, 42 -> delays 5, 2, 2 -> p50 2 s > 1 s: stalls.
    base = pred([110, 120, 140])
    one = pred([110.5, 120.5, 140.5])
    two = pred([112, 122, 142], free=115.0, reshard=15.0)
    s = MoveStudy(t0=100.0, ks=(0, 1, 2), predictions=(base, one, two), tolerance_s=1.0)
    assert list(s.starts(2)) == [15.0, 22.0, 42.0]
    assert list(s.delays(1)) == pytest.approx([0.5, 0.5, 0.5])
    assert s.delay_quantiles(2)[1] == pytest.approx(2.0)
    assert (s.stalls(0), s.stalls(1), s.stalls(2)) == (False, False, True)
    assert s.can_move == 1 and s.ks[s.first_stall] == 2
    assert s.threshold_s == pytest.approx(21.0)  # as-is p50 20 s + 1 s
    assert s.answer().startswith("1 engine can move to training; moving 2 stalls the next batch by 2.0 s")
    # Unpaired, the bands overlap (k=2 p10 15 s < as-is p50 20 s); paired, every draw is later.


def test_a_batch_that_never_forms_stalls():
    base = pred([110, 120, 140])
    never = pred([math.nan, math.nan, math.nan])
    s = MoveStudy(t0=100.0, ks=(0, 3), predictions=(base, never), tolerance_s=5.0)
    assert s.stalls(1) and s.can_move == 0 and "never forms" in s.answer()


def test_every_k_on_time():
    base = pred([110, 120, 140])
    s = MoveStudy(t0=100.0, ks=(0, 1, 2), predictions=(base, base, base), tolerance_s=0.0)
    assert s.can_move == 2 and s.first_stall is None and "every k tried, up to 2" in s.answer()


def test_spike_snapshot_is_the_busiest_idle_instant():
    cfg = small_cfg(steps=3)
    costs = linear_costs()
    sp = spike_snapshot(cfg, costs=costs)
    snap = sp.snapshot
    assert snap.trainer.phase == "waiting" and snap.trainer.steps_done == 1 and sp.step == 2
    assert len(snap.requests()) == sp.in_flight > 0
    # The run itself: the batch of step 2 is ready after the snapshot, and no instant of that wait
    # holds more requests in flight.
    from simrl.engine.sim import build_simulation

    sim = build_simulation(cfg, costs=costs)
    sim.start()
    most = 0
    while sim.step() and not any(e["kind"] == "batch_ready" and e.get("step") == 2 for e in sim.events[-3:]):
        if sim.st.steps_done >= 1 and sim.trainer.phase.startswith("waiting for a batch"):
            most = max(most, sum(len(i.running) + len(i.waiting) for i in sim.instances) + len(sim.router.queue))
    assert most == sp.in_flight
    ready = next(e["t"] for e in sim.events if e["kind"] == "batch_ready" and e.get("step") == 2)
    assert sp.truth_batch_s == ready > snap.time_s
    with pytest.raises(SnapshotError, match="the run has 3 training steps"):
        spike_snapshot(cfg, costs=costs, after_steps=3)


def test_move_engines_on_a_snapshot(tmp_path):
    cfg = small_cfg(steps=3, extra=["deployment.rollout.instances=3"])
    costs = linear_costs(sync_s=1.0)
    snap = spike_snapshot(cfg, costs=costs).snapshot
    study = move_engines(snap, [1, 2], draws=3, costs=costs)
    assert study.ks == (0, 1, 2)
    # ConstantSync(1 s): moving engines costs the trainer 1 s of resharding; as-is none.
    assert [p.reshard_s for p in study.predictions] == [0.0, 1.0, 1.0]
    # One engine left serves everything: the batch is later than with three.
    assert study.delay_quantiles(2)[1] > 0
    with pytest.raises(SnapshotError, match="rollout has 3"):
        move_engines(snap, [3], draws=1, costs=costs)
    path = tmp_path / "s.json"
    write_snapshot(snap, path)
    res = CliRunner().invoke(predict_cli, ["move-engines", str(path), "--draws", "1", "--upto", "3",
                                           "-o", str(tmp_path / "r")])
    assert res.exit_code == 2 and "at most 2 can move" in res.output
    res = CliRunner().invoke(predict_cli, ["move-engines", "-o", str(tmp_path / "r")])
    assert res.exit_code == 2 and "either a SNAPSHOT file or --spike" in res.output


def test_move_range_option(tmp_path):
    res = CliRunner().invoke(predict_cli, ["x.json", "--move-to-training", "3..1"])
    assert res.exit_code == 2 and "neither an integer K nor a range A..B" in res.output


def test_the_example_answers_from_the_simulation(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "BIN": str(Path(sys.executable).parent)}
    res = subprocess.run(["bash", str(ROOT / "examples/predict/move_engines.sh"), str(out), "--quick"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads((out / "move_engines.json").read_text())
    report = (out / "report.md").read_text()
    k = data["can_move"]
    assert f"**Answer: {k} engine{'s' if k != 1 else ''} can move to training" in report
    assert f"answer: {data['answer']}" in res.stdout
    assert [m["k"] for m in data["moves"]] == [0, 1, 2, 3]  # 4 engines: k = 0..3
    # The answer follows the table: every k up to can_move on time, the next one stalls.
    stalls = [m["stalls"] for m in data["moves"]]
    assert not any(stalls[: k + 1]) and (k == 3 or stalls[k + 1])
    assert (out / "move_engines.html").exists() and (out / "spike.json").exists()
    assert "Check against the run itself" in report


def test_take_at_a_time_and_bad_times(tmp_path):
    from predict_helpers import SMALL

    from simrl.snapshot import read_snapshot

    out = tmp_path / "s.json"
    res = CliRunner().invoke(predict_cli, ["take", "--at", "5", "-o", str(out), *SMALL, "run.training_steps=2"])
    assert res.exit_code == 0, res.output
    snap = read_snapshot(out)
    assert 0 < snap.time_s <= 5.0 and snap.sim_config() == small_cfg(steps=2)
    res = CliRunner().invoke(predict_cli, ["take", "--at", "soon", "-o", str(out), *SMALL])
    assert res.exit_code == 2 and "--at: expected a time in seconds or 'spike', got 'soon'" in res.output
