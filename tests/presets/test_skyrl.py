"""SkyRL: late groups are trained and counted as violations; a small S stalls, nothing is dropped."""

from preset_scenarios import run, uniform_workload

STRAGGLERS = (2, 5)


def scenario(max_staleness):
    wl = uniform_workload(groups=64, n=4, completion=100, stragglers=STRAGGLERS, straggler_completion=1200)
    return run(["policy=skyrl", f"policy.max_staleness_steps={max_staleness}", "policy.policy_mini_batch_size=8",
                "policy.num_parallel_generation_workers=16", "run.training_steps=8"], wl, step_s=2.0)


def test_small_bound_counts_violations_and_drops_nothing():
    rep, _ = scenario(1)
    t = rep.totals
    assert t["trajectories_dropped"] == 0
    assert t["staleness_max"] > 1
    assert t["staleness_violations"] == len(STRAGGLERS)  # both stragglers trained, late
    assert t["staleness_violations"] == sum(1 for s in rep.steps for x in s.staleness if x > 1)


def test_small_bound_stalls_rollout_rather_than_wasting_work():
    small, _ = scenario(1)
    large, _ = scenario(4)
    wait = lambda rep: sum(s.batch_ready - s.wait_start for s in rep.steps[1:])  # noqa: E731
    assert wait(small) > wait(large) + 1.0  # the trainer waits on capacity-limited rollout
    assert small.totals["groups_dispatched"] < large.totals["groups_dispatched"]
    assert small.totals["tokens_wasted_abort"] == small.totals["tokens_wasted_filter"] == 0
