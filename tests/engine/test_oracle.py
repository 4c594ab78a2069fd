"""Analytic oracles: scenarios whose timing is known in closed form."""

import pytest
from simhelpers import linear_costs, run_sim

from workloads.types import build_workload, single_turn_group


def constant_workload(groups, n, prompt, completion):
    return build_workload("const", 0, [single_turn_group(g, n, prompt, [completion] * n) for g in range(groups)])


def rollout_time(B, P, L, a, b, c, p):
    """Batch of B identical requests admitted together at t=0 on one instance, prefill unchunked.

    Iteration 0 prefills B*P tokens (no sequence decodes yet) and yields every first token;
    iterations j = 1..L-1 decode B sequences holding B*(P+j) KV tokens.
    """
    t = a + p * B * P
    for j in range(1, L):
        t += a + b * B + c * B * (P + j)
    return t


@pytest.mark.parametrize("kv_policy", ["reserve", "on_demand"])
def test_sync_policy_single_instance_step_times_in_closed_form(kv_policy):
    G, n, P, L = 4, 8, 300, 50
    a, b, c, p = 0.004, 1e-4, 2e-8, 3e-5
    step_s, sync_s = 7.0, 1.5
    costs = linear_costs(kv_tokens=10**6, step_s=step_s, sync_s=sync_s, a=a, b=b, c=c, p=p)
    report, _ = run_sim(
        ["policy=sync", f"policy.batch_groups={G}", "deployment.rollout.instances=1",
         "deployment.rollout.max_num_batched_tokens=0", "deployment.rollout.prefix_caching=false",
         f"deployment.rollout.kv_policy={kv_policy}", "run.training_steps=3"],
        constant_workload(G * 3, n, P, L), costs,
    )
    R = rollout_time(G * n, P, L, a, b, c, p)
    period = R + step_s + sync_s
    assert report.diagnosis is None
    for k, step in enumerate(report.steps):
        assert step.batch_ready == pytest.approx(k * period + R, rel=1e-12)
        assert step.train_end - step.train_start == pytest.approx(step_s)
        assert step.publish_end == pytest.approx((k + 1) * period, rel=1e-12)
        assert step.staleness == (0,) * G
    assert report.totals["rollout_busy_fraction"] == pytest.approx(3 * R / (3 * period), rel=1e-9)


def test_shared_prompt_is_prefilled_once_per_group():
    G, n, P, L = 1, 8, 400, 10
    a, p = 0.001, 1e-4
    costs = linear_costs(kv_tokens=10**6, a=a, b=0.0, c=0.0, p=p)
    report, sim = run_sim(
        ["policy=sync", "policy.batch_groups=1", "deployment.rollout.instances=1",
         "deployment.rollout.max_num_batched_tokens=0", "run.training_steps=1"],
        constant_workload(G, n, P, L), costs,
    )
    prefills = [e["prefill"] for e in sim.events if e["kind"] == "call_admit"]
    assert prefills == [P] + [0] * (n - 1)
    # One prefill iteration of P tokens then L-1 decode iterations.
    assert report.steps[0].batch_ready == pytest.approx(a + p * P + (L - 1) * a)


def test_chunked_prefill_spreads_a_long_prompt_over_iterations():
    P, budget = 1000, 256
    a, p = 0.002, 1e-5
    costs = linear_costs(kv_tokens=10**6, a=a, b=0.0, c=0.0, p=p)
    report, sim = run_sim(
        ["policy=sync", "policy.batch_groups=1", "deployment.rollout.instances=1",
         f"deployment.rollout.max_num_batched_tokens={budget}", "run.training_steps=1"],
        build_workload("one", 0, [single_turn_group(0, 1, P, [5])]), costs,
    )
    chunks = -(-P // budget)  # 4 prefill iterations, the last one yields the first token
    assert report.steps[0].batch_ready == pytest.approx(chunks * a + p * P + 4 * a)
    assert report.calls[0].first_token == pytest.approx(chunks * a + p * P)


def test_tool_latency_after_the_last_call_delays_the_trajectory():
    from workloads.types import CallSpec, GroupSpec, TrajectorySpec

    a = 0.01
    costs = linear_costs(kv_tokens=10**6, a=a, b=0.0, c=0.0, p=0.0)
    group = GroupSpec(0, 10, (TrajectorySpec(0, (CallSpec(10, 10, 5, 2.5, False),), 1.0),
                              TrajectorySpec(1, (CallSpec(10, 10, 5, 0.0, False),), 0.0)))
    report, _ = run_sim(["policy=sync", "policy.batch_groups=1", "deployment.rollout.instances=1",
                         "run.training_steps=1"], build_workload("lat", 0, [group]), costs)
    # Both calls finish after 5 iterations; the first trajectory then runs its tool for 2.5 s.
    assert report.steps[0].batch_ready == pytest.approx(5 * a + 2.5)
