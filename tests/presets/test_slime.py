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


def test_partial_rollout_next_chunk_includes_the_carried_groups():
    # Upstream THUDM/slime@624b824a slime/rollout/sglang_rollout.py:408-411: `while
    # remaining_batch_size < target: data_source(over_sampling_batch_size)`, and the data source
    # serves recycled (aborted partial) groups first inside that chunk (data_source.py:177-189).
    # Chunk 40, target 32, no filter: rollout 0 submits 40 new groups and ends with 40 - 32 = 8
    # carried; every later rollout's chunk is those 8 + 32 new = 40, again leaving 8. So each
    # version after 0 dispatches exactly 32 new groups (before the fix: 40, and the carry-over
    # grew by 8 per rollout).
    rep, sim = run(["policy=slime", "policy.over_sampling_batch_size=40", "policy.partial_rollout=true",
                    "run.training_steps=6"], long_tail_workload(groups=64))
    per_version = {}
    running, carried = 0, []
    for e in sim.events:
        if e["kind"] == "group_dispatch":
            running += 1
            per_version[e["version"]] = per_version.get(e["version"], 0) + 1
        elif e["kind"] in ("group_done", "group_abort"):
            running -= 1
        elif e["kind"] == "batch_ready":
            carried.append(running)
    assert per_version[0] == 40
    assert all(per_version[v] == 32 for v in range(1, len(rep.steps) + 1))
    assert max(carried) <= 8  # never more than one chunk's surplus in flight


def test_fully_async_publishes_only_after_the_next_rollout_is_collected():
    # Upstream THUDM/slime@624b824a train_async.py:66-70: before `update_weights` the driver
    # waits for the next rollout (`ray.get(rollout_data_next_future)`), which in fully_async
    # returns once `rollout_batch_size` groups are collected. So step k+1's batch is ready no
    # later than version k is published, and every group of it was generated before that
    # update: trained from version k, it has staleness >= 1.
    # A fast trainer (0.2 s steps, 0.1 s sync), so the buffer is short of the target when a step
    # ends and the update has to wait (without the wait every update took < 0.2 s).
    rep, sim = run(["policy=slime", "policy.mode=fully_async", "policy.sglang_server_concurrency=24"],
                   long_tail_workload(groups=64), step_s=0.2, sync_s=0.1)
    steps = rep.steps
    for prev, nxt in zip(steps, steps[1:], strict=False):
        assert nxt.batch_ready <= prev.publish_end
        assert min(nxt.staleness) >= 1
    assert all(s.publish_end - s.train_end > 1.0 for s in steps[:-1])  # every update waited for a rollout
