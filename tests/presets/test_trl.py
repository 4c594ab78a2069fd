"""TRL: synchronous colocated GRPOTrainer by default; AsyncGRPOTrainer drops stale samples at dequeue."""

from simhelpers import linear_costs, random_workload, run_sim

# 4 per device x 2 processes = 8 samples = 2 groups of 4 per optimizer step
BATCH = ["policy.per_device_train_batch_size=4", "policy.num_processes=2"]


def _run(*extra, step_s=3.0, completion=(50, 2500)):
    wl = random_workload(groups=40, n=4, seed=11, completion=completion)
    ov = ["policy=trl", *BATCH, "run.training_steps=5", *extra]
    return run_sim(ov, wl, linear_costs(step_s=step_s))


def test_sync_mode_is_colocated_and_rollout_idles_while_training():
    report, sim = _run()
    assert sim.placement == "colocated"
    assert [s.groups for s in report.steps] == [2] * 5
    assert report.totals["staleness_max"] == 0
    busy = [(e["t"]) for e in sim.events if e["kind"] in ("call_admit", "call_finish")]
    for s in report.steps:
        assert not any(s.train_start < t < s.train_end for t in busy)  # generation never overlaps training


def test_sync_steps_per_generation_reuses_one_generation_for_later_steps():
    report, _ = _run("policy.steps_per_generation=2")
    assert [max(s.staleness) for s in report.steps] == [0, 1, 0, 1, 0]


def test_async_drops_samples_older_than_max_staleness_at_dequeue():
    report, sim = _run("policy.mode=async", "policy.max_staleness=1", "policy.max_inflight_tasks=64", step_s=0.5,
                       completion=(50, 6000))
    assert sim.placement == "disaggregated"
    dispatched = {e["gid"]: e["version"] for e in sim.events if e["kind"] == "group_dispatch"}
    for s in report.steps:
        assert all(s.train_version - dispatched[g] <= 1 for g in s.gids)
    assert report.totals["tokens_wasted_filter"] > 0  # long-tailed stragglers were dropped
    assert any(c.version_end > c.version_start for c in report.calls)  # keep-pause sync


def test_async_overlaps_generation_with_training():
    sync, _ = _run(step_s=10.0)
    report, _ = _run("policy.mode=async", step_s=10.0)
    assert report.totals["makespan_s"] < sync.totals["makespan_s"]


def test_num_generations_other_than_the_workload_group_size_stops_at_the_first_dispatch():
    # the engine calls the policy's check_group_size at every dispatch (the fast path's lowering at the workload's
    # group size: tests/fast/test_lowering.py), with the knob named
    import pytest

    from simrl.engine.errors import SimulationError

    with pytest.raises(SimulationError, match="trl: num_generations=2 but the workload's groups hold 4 samples"):
        _run("policy.num_generations=2")
    report, _ = _run("policy.num_generations=4")
    assert [s.groups for s in report.steps] == [2] * 5
