"""ART PipelineTrainer: variable-size batches, stale and zero-variance discards, the collapse failsafe."""

import pytest
from simhelpers import linear_costs, random_workload, run_sim

from simrl.engine.core import SimulationError


def _run(*extra, step_s=3.0, zero_variance=0.0, completion=(50, 2500), groups=64):
    wl = random_workload(groups=groups, n=4, seed=17, completion=completion, zero_variance=zero_variance)
    return run_sim(["policy=art", "run.training_steps=6", *extra], wl, linear_costs(step_s=step_s))


def test_batch_size_varies_between_min_and_max():
    report, _ = _run()
    sizes = [s.groups for s in report.steps]
    assert all(4 <= n <= 40 for n in sizes)
    assert len(set(sizes)) > 1
    capped, _ = _run("policy.max_batch_size=6", step_s=10.0)
    assert max(s.groups for s in capped.steps) == 6


def test_step_lora_lets_old_versions_finish_without_a_pause():
    report, sim = _run()
    assert all(c.version_start == c.version_end for c in report.calls)  # each call on its own adapter
    assert report.totals["staleness_max"] <= 4
    inflight, _ = _run("policy.rollout_weight_update_mode=in_flight_lora")
    assert any(c.version_end > c.version_start for c in inflight.calls)


def test_stale_and_zero_variance_groups_are_discarded():
    report, sim = _run("policy.max_steps_off_policy=0", step_s=0.5, zero_variance=0.3, completion=(50, 6000))
    assert report.totals["staleness_max"] == 0
    wl = sim.workload
    for s in report.steps:
        for w in s.prompts:
            assert len(set(wl.traj_reward[wl.group_trajs(w)])) > 1
    drops = [e for e in sim.events if e["kind"] == "group_done" and e["verdict"] == "drop"]
    assert len(drops) > 0 and report.totals["tokens_wasted_filter"] > 0


def test_collapse_failsafe_stops_an_all_zero_variance_run():
    with pytest.raises(SimulationError, match="MODEL COLLAPSE DETECTED"):
        _run("policy.discard_queue_multiplier=2", zero_variance=1.0, groups=16)
