"""ROLL: batches read the oldest start step first; GC aborts work that has aged out."""

from preset_scenarios import long_tail_workload, run

B = 16


def roll(*knobs):
    return run(["policy=roll", f"policy.rollout_batch_size={B}", *knobs], long_tail_workload(groups=64), step_s=1.0)


def test_fractional_ratio_takes_part_of_the_oldest_step_first():
    rep, _ = roll("policy.async_generation_ratio=0.5")
    for s in rep.steps[1:]:
        # int(B * 0.5) groups from the previous step, then the current step's.
        assert list(s.staleness) == [1] * (B // 2) + [0] * (B // 2)


def test_batches_are_oldest_step_first_and_bounded_by_ceil_ratio():
    rep, _ = roll("policy.async_generation_ratio=2")
    for s in rep.steps:
        assert list(s.staleness) == sorted(s.staleness, reverse=True)
    assert rep.totals["staleness_max"] == 2


def test_gc_aborts_over_age_extra_prompts():
    rep, sim = roll("policy.async_generation_ratio=1", "policy.is_use_additional_prompts=true",
                    "policy.max_additional_running_prompts=8")
    t = rep.totals
    version, dispatch_version, aged = 0, {}, []
    for e in sim.events:  # replay telemetry in order: the version at each abort
        if e["kind"] == "publish_end":
            version = e["version"]
        elif e["kind"] == "group_dispatch":
            dispatch_version[e["gid"]] = e["version"]
        elif e["kind"] == "group_abort":
            aged.append(version - dispatch_version[e["gid"]])
    assert aged and t["tokens_wasted_abort"] > 0
    assert min(aged) >= 2  # only groups started ceil(ratio) + 1 steps ago are collected
    assert t["staleness_max"] <= 1


def test_without_extra_prompts_nothing_is_collected():
    rep, _ = roll("policy.async_generation_ratio=1")
    assert rep.totals["trajectories_dropped"] == 0 and rep.totals["staleness_max"] == 1
