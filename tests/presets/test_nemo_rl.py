"""NeMo-RL: batches bound to a target step; drain before every refit by default."""

from simhelpers import linear_costs, random_workload, run_sim

B = 8


def _run(*extra, step_s=2.0):
    wl = random_workload(groups=64, n=4, seed=7, completion=(50, 2500))
    ov = ["policy=nemo_rl", f"policy.num_prompts_per_step={B}", "run.training_steps=5", *extra]
    return run_sim(ov, wl, linear_costs(step_s=step_s))


def _dispatch_versions(sim):
    return {e["gid"]: e["version"] for e in sim.events if e["kind"] == "group_dispatch"}


def test_default_drains_before_each_refit():
    report, sim = _run()
    assert report.diagnosis is None
    # no call is generating across a publication, so none changes version mid-call
    assert all(c.version_start == c.version_end for c in report.calls)
    # and no call runs while a refit waits: every call ends before the next publish completes
    for s in report.steps:
        assert not any(c.first_token is not None and c.first_token < s.publish_end < c.finish for c in report.calls)


def test_each_batch_is_exactly_the_groups_targeted_at_its_step():
    report, sim = _run("policy.max_trajectory_age_steps=2")
    ver = _dispatch_versions(sim)
    assert [s.groups for s in report.steps] == [B] * 5
    for s in report.steps:
        # generated for target v at some version in [v - L, v]
        assert all(s.train_version - 2 <= ver[g] <= s.train_version for g in s.gids)
    assert report.totals["staleness_max"] <= 2


def test_in_flight_updates_keep_requests_running_across_refits():
    drained, _ = _run()
    report, _ = _run("policy.in_flight_weight_updates=true")
    assert any(c.version_end > c.version_start for c in report.calls)
    assert report.totals["staleness_max"] <= 1
    assert report.totals["makespan_s"] < drained.totals["makespan_s"]
    # recomputing the KV cache after the update re-prefills the interrupted requests
    recompute, _ = _run("policy.in_flight_weight_updates=true", "policy.recompute_kv_cache_after_weight_updates=true")
    assert recompute.totals["tokens_reprefilled"] > report.totals["tokens_reprefilled"]


def test_a_group_size_other_than_num_generations_per_prompt_is_refused():
    # `check_group_size`: the engine calls it at every dispatch, the fast path's lowering at the workload's group
    # size, so both refuse it with the same message (tests/fast/outsider.py seed 235 ran it on the fast path while
    # SimPy stopped)
    import pytest

    from presets.nemo_rl import NemoRLPolicy
    from simrl.policy.errors import PolicyError
    from simrl.policy.params import LoweringContext

    pol = NemoRLPolicy(num_generations_per_prompt=1)
    with pytest.raises(PolicyError, match="num_generations_per_prompt=1 but the workload's groups hold 4 samples"):
        pol.check_group_size(4)
    pol.check_group_size(1)
    assert NemoRLPolicy(num_generations_per_prompt=4).lower(LoweringContext(group_size=4, instances=2)).fast_path_exact
