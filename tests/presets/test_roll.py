"""ROLL: batches read the oldest start step first; GC aborts work that has aged out."""

import pytest
from preset_scenarios import long_tail_workload, run

from simrl.config import ConfigError, load_config

B = 16


def roll(*knobs):
    return run(["policy=roll", f"policy.rollout_batch_size={B}", *knobs], long_tail_workload(groups=64), step_s=1.0)


def test_fractional_ratio_takes_part_of_the_oldest_step_first():
    # r = 1.5 (RLVR accepts fractional ratios >= 1): the first advance_step budgets ceil(16 * 1.5)
    # + 16 = 40 prompts on step 0, each later step 16 more (generate_scheduler.py:223-254).
    # get_batch (generate_scheduler.py:342-398) reads from min_step = cur - ceil(1.5) = cur - 2 and
    # takes only int(16 * 0.5) = 8 there: batch 1 (cur 0) is 16 of step 0; batch 2 (cur 1, step -1
    # absent) 16 more of step 0; from batch 3 on, 8 of step cur-2 (staleness 2) then 8 of cur-1.
    rep, _ = roll("policy.async_generation_ratio=1.5")
    assert [list(s.staleness) for s in rep.steps] == [[0] * B, [1] * B] + [[2] * 8 + [1] * 8] * 3


def test_ratios_rlvr_refuses_are_a_config_error():
    # roll/pipeline/rlvr/rlvr_config.py:221-222: async (ratio > 0) asserts ratio >= 1.0.
    for bad in ("0.5", "0.99"):
        with pytest.raises(ConfigError, match=r"async_generation_ratio.*0 \(synchronous\) or >= 1\.0"):
            load_config(overrides=["policy=roll", f"policy.async_generation_ratio={bad}"])
    for ok in ("0", "1", "1.5"):
        load_config(overrides=["policy=roll", f"policy.async_generation_ratio={ok}"])


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
