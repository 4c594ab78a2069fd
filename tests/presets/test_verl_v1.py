"""verl V1: over-span groups are evicted and refilled (churn); the sync mode idles rollout in training."""

from preset_scenarios import rollout_events_during_training, run, uniform_workload

WL = uniform_workload(groups=64, n=4, completion=300)
ASYNC = ["policy=verl_v1", "policy.trainer_mode=separate_async", "policy.num_warmup_batches=2"]


def test_deep_pipeline_with_tight_threshold_churns():
    rep, _ = run([*ASYNC, "policy.max_off_policy_threshold=2"], WL, step_s=30.0)
    t = rep.totals
    # Depth of 3 batches, span limit 2: each step evicts a batch dispatched two versions ago
    # and refills it one for one.
    assert t["trajectories_dropped"] > 0 and t["tokens_wasted_filter"] > 0
    assert t["groups_dispatched"] > len(rep.steps) * 32 + 2 * 32
    assert t["staleness_max"] <= 1


def test_default_threshold_keeps_everything():
    rep, _ = run([*ASYNC], WL, step_s=30.0)
    assert rep.totals["trajectories_dropped"] == 0 and rep.totals["staleness_max"] == 2


def test_sync_mode_is_colocated_and_rollout_idles_while_training():
    rep, sim = run(["policy=verl_v1"], WL, step_s=5.0)
    assert sim.placement == "colocated" and rep.totals["staleness_max"] == 0
    assert rollout_events_during_training(sim) == []
