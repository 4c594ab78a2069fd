"""Dressage: a persistent worker; a version crossing fails the group, retried at most rollout_max_retries times."""

from collections import Counter

from simhelpers import linear_costs, random_workload, run_sim

B = 8


def _run(*extra, step_s=2.0):
    wl = random_workload(groups=64, n=4, seed=19, completion=(50, 4000))
    ov = ["policy=dressage", f"policy.rollout_batch_size={B}", "run.training_steps=5", *extra]
    return run_sim(ov, wl, linear_costs(step_s=step_s))


def _attempts(sim):
    """Dispatches per prompt (workload group, epoch): the first try plus its retries."""
    return Counter((e["wg"], e["epoch"]) for e in sim.events if e["kind"] == "group_dispatch")


def test_version_crossing_groups_are_retried_at_most_rollout_max_retries_times():
    report, sim = _run()
    assert report.diagnosis is None
    attempts = _attempts(sim)
    assert sim.tally.groups_retried > 0
    assert max(attempts.values()) <= 1 + 2
    assert report.totals["tokens_wasted_abort"] > 0  # the failed attempts' tokens
    # a trajectory never spans versions: every call generated under one version
    assert all(c.version_start == c.version_end for c in report.calls)
    fewer, fewer_sim = _run("policy.rollout_max_retries=0")
    assert max(_attempts(fewer_sim).values()) == 1 and fewer_sim.tally.groups_retried == 0
    assert fewer.totals["trajectories_dropped"] > 0


def test_partial_rollout_resumes_interrupted_requests_instead_of_retrying():
    strict, _ = _run()
    report, sim = _run("policy.dressage_partial_rollout=true")
    assert sim.tally.groups_retried == 0
    assert report.totals["tokens_reprefilled"] > 0 and report.totals["aborts"] > 0
    assert report.totals["tokens_wasted_abort"] < strict.totals["tokens_wasted_abort"]
    # ... unless a trajectory lives through more version switches than allowed
    capped, capped_sim = _run("policy.dressage_partial_rollout=true", "policy.max_partial_rollout_preempts=0")
    assert capped_sim.tally.groups_retried > 0


def test_staleness_keep_versions_bounds_the_trained_versions():
    report, _ = _run("policy.dressage_staleness_keep_versions=1", "policy.dressage_partial_rollout=true",
                     "policy.max_partial_rollout_preempts=1")
    assert report.totals["staleness_max"] <= 1
    assert report.totals["tokens_wasted_filter"] > 0


def test_partial_async_returns_the_target_and_keeps_the_rest_running():
    report, _ = _run("policy.rollout_mode=partial_async", "policy.global_batch_size=16")
    assert [s.groups for s in report.steps] == [4] * 5  # 16 samples / 4 per group
