"""slime: the default (synchronous, colocated) rollout aborts its surplus and idles during training."""

from preset_scenarios import long_tail_workload, rollout_events_during_training, run


def test_default_mode_aborts_the_surplus_and_wastes_tokens():
    rep, sim = run(["policy=slime", "policy.over_sampling_batch_size=40"], long_tail_workload(groups=64))
    t = rep.totals
    aborted = [e for e in sim.events if e["kind"] == "group_abort"]
    assert len(aborted) == 8 * len(rep.steps)  # 40 submitted, 32 kept, 8 cut per rollout
    # Nothing is filtered: every token of a cut group is abort waste (docs/model.md).
    assert t["tokens_wasted_abort"] > 0 and t["tokens_wasted_filter"] == 0
    assert t["staleness_max"] == 0


def test_sync_mode_is_colocated_and_rollout_idles_while_training():
    rep, sim = run(["policy=slime"], long_tail_workload(groups=64))
    assert sim.placement == "colocated"
    assert rollout_events_during_training(sim) == []
    assert all(s.offload_s >= 0 for s in rep.steps)


def test_train_async_overlaps_one_rollout_with_training():
    rep, sim = run(["policy=slime", "policy.mode=train_async"], long_tail_workload(groups=64))
    assert rollout_events_during_training(sim)
    assert rep.totals["staleness_max"] == 1 and rep.totals["trajectories_dropped"] == 0


def test_fully_async_restarts_in_flight_groups_at_every_update():
    rep, sim = run(["policy=slime", "policy.mode=fully_async", "policy.sglang_server_concurrency=24"],
                   long_tail_workload(groups=64))
    assert rep.totals["groups_retried"] > 0 and rep.totals["tokens_wasted_abort"] > 0
    assert sim.policy.staleness_spec.bound is None
