"""OpenRLHF: whole rollout batches pipelined through a Q-deep semaphore; drain by default."""

from simhelpers import linear_costs, random_workload, run_sim

B = 8  # groups per rollout batch in these scenarios


def _run(*extra, zero_variance=0.0, step_s=4.0):
    wl = random_workload(groups=64, n=4, seed=5, completion=(50, 2500), zero_variance=zero_variance)
    ov = ["policy=openrlhf", f"policy.rollout_batch_size={B}", "run.training_steps=5", *extra]
    return run_sim(ov, wl, linear_costs(step_s=step_s))


def _dispatch_times(sim):
    return {e["gid"]: e["t"] for e in sim.events if e["kind"] == "group_dispatch"}


def test_default_pipelines_whole_batches_one_ahead_and_drains():
    report, sim = _run()
    assert report.diagnosis is None
    assert [s.groups for s in report.steps] == [B] * 5
    disp = _dispatch_times(sim)
    for prev, step in zip(report.steps, report.steps[1:], strict=False):
        # batch k+1 starts only once batch k was dequeued (Q=1), all of it at once
        assert {disp[g] for g in step.gids} == {prev.batch_ready}
        assert set(step.staleness) == {1}  # generated on version k-1, trained on version k
    # the broadcast waits for the batch in progress: no call changes version mid-generation
    assert all(c.version_start == c.version_end for c in report.calls)


def test_queue_size_two_lets_two_batches_run_ahead():
    report, sim = _run("policy.async_queue_size=2", step_s=30.0)  # slow trainer: the queue fills
    disp = _dispatch_times(sim)
    ready = [s.batch_ready for s in report.steps]
    # batch 3 (index 2) was dispatched while step 1 trained, before step 2's batch was taken
    assert min(disp[g] for g in report.steps[2].gids) < ready[1]
    assert report.totals["staleness_max"] <= 2


def test_partial_rollout_keeps_running_requests_across_the_broadcast():
    report, _ = _run("policy.partial_rollout_enable=true", step_s=1.0)
    assert any(c.version_end > c.version_start for c in report.calls)
    assert report.totals["tokens_wasted_abort"] == 0
    assert report.totals["staleness_max"] <= 1  # queue depth still bounds it
    # unlike the default, the trainer does not wait for the batch in progress before publishing
    drained, _ = _run(step_s=1.0)
    assert report.totals["makespan_s"] < drained.totals["makespan_s"]


def test_dynamic_filtering_drops_all_equal_groups_and_refills_the_batch():
    report, sim = _run("policy.dynamic_filtering_enable=true", zero_variance=0.4)
    assert [s.groups for s in report.steps] == [B] * 5  # the batch still fills
    assert report.totals["tokens_wasted_filter"] > 0
    assert sum(1 for e in sim.events if e["kind"] == "group_done" and e["verdict"] == "drop") > 0
    trained = {g for s in report.steps for g in s.gids}
    assert all(len(set(sim.workload.traj_reward[sim.workload.group_trajs(w)])) > 1
               for s in report.steps for w in s.prompts) and trained


def test_a_group_size_other_than_n_samples_per_prompt_is_refused():
    # `check_group_size`, which the engine calls at every dispatch and the fast path's lowering at the workload's
    # group size (same message)
    import pytest

    from presets.openrlhf import OpenRLHFPolicy
    from simrl.policy.errors import PolicyError
    from simrl.policy.params import LoweringContext

    with pytest.raises(PolicyError, match="n_samples_per_prompt=2 but the workload's groups hold 4 samples"):
        OpenRLHFPolicy(n_samples_per_prompt=2).check_group_size(4)
    OpenRLHFPolicy(n_samples_per_prompt=4).check_group_size(4)
    OpenRLHFPolicy(n_samples_per_prompt=4).lower(LoweringContext(group_size=4, instances=2))
