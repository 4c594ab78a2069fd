"""Engine accounting seen through presets: abort waste vs filter waste, buffer-drop events."""

from preset_scenarios import run

from workloads.types import build_workload, single_turn_group


def _slime_workload():
    # 40 groups of 4 samples, prompt 200. Groups 0-31: every sample 100 tokens. Groups 32-39:
    # samples 1-3 are 50 tokens, sample 0 is 4000 (a straggler).
    out = [single_turn_group(g, 4, 200, [100] * 4, [0.0, 1.0, 0.0, 1.0]) for g in range(32)]
    out += [single_turn_group(g, 4, 200, [4000, 50, 50, 50], [0.0, 1.0, 0.0, 1.0]) for g in range(32, 40)]
    return build_workload("acct", 0, out)


def test_tokens_of_an_aborted_group_are_abort_waste_not_filter_waste():
    # slime sync, over-sampling 40 for a batch of 32, one step, one instance, prefill unchunked:
    # all 160 calls prefill in the first iteration and decode one token per iteration. At
    # iteration 50 the 24 50-token calls finish (3 x 50 = 150 tokens per straggling group); at
    # iteration 100 the 32 short groups finish, the batch (32 x 4 x 100 = 12,800 tokens) is
    # complete and slime aborts the 8 straggling groups, whose stragglers hold 100 tokens each.
    # Abort waste = 8 x (150 + 100) = 2,000; filter waste 0 (no group got a drop verdict). Before
    # the fix the 8 x 150 = 1,200 finished tokens were reported as filter waste.
    rep, sim = run(["policy=slime", "policy.over_sampling_batch_size=40", "run.training_steps=1",
                    "deployment.rollout.max_num_batched_tokens=0"], _slime_workload(), step_s=1.0)
    t = rep.totals
    assert t["tokens_trained"] == 12_800
    assert sum(1 for e in sim.events if e["kind"] == "group_abort") == 8
    assert t["tokens_wasted_filter"] == 0
    assert t["tokens_wasted_abort"] == 2_000
    assert t["tokens_generated"] == t["tokens_trained"] + t["tokens_wasted_abort"]


def test_buffer_evictions_are_telemetry_events():
    # trl async with max_staleness=0 drops buffered groups that aged past the bound at each
    # publication (the policy's drop_buffered): each such drop is a `buffer_drop` event naming
    # the group, and their number equals the dropped groups that never had a `group_done` drop.
    from preset_scenarios import long_tail_workload
    rep, sim = run(["policy=trl", "policy.mode=async", "policy.max_staleness=0"], long_tail_workload(groups=96))
    drops = [e for e in sim.events if e["kind"] == "buffer_drop"]
    done_dropped = sum(1 for e in sim.events if e["kind"] == "group_done" and e["verdict"] != "accept")
    aborted = sum(1 for e in sim.events if e["kind"] == "group_abort")
    assert drops and all(e["by"] in ("policy", "staleness") for e in drops)
    assert len({e["gid"] for e in drops}) == len(drops)
    assert len(drops) + done_dropped + aborted == rep.totals["trajectories_dropped"] // 4


def test_groups_admitted_during_a_paused_sync_are_dispatched_at_the_resume_with_v_plus_1():
    # dressage pauses every instance at an update (keep_pause). A group that completes while the
    # weight keeper waits for the iteration boundary frees admission; upstream holds new requests
    # until the weights are loaded, so the group it admits is dispatched at the resume
    # (publish_end) stamped with the new version, never during [train_end, publish_end) stamped
    # with the old one.
    from preset_scenarios import long_tail_workload
    rep, sim = run(["policy=dressage", "deployment.rollout.instances=2", "run.training_steps=4"],
                   long_tail_workload(groups=96, n=4), step_s=2.0)
    dispatches = [e for e in sim.events if e["kind"] == "group_dispatch"]
    for s in rep.steps:
        assert not [e for e in dispatches if s.train_end <= e["t"] < s.publish_end]
    held = [e for e in dispatches if any(e["t"] == s.publish_end for s in rep.steps)]
    assert held
    for e in held:
        step = next(s for s in rep.steps if s.publish_end == e["t"])
        assert e["version"] == step.step  # version v+1 = the step just published
