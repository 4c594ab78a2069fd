"""Invariants of the engine on generated scenarios (built-in policies)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simhelpers import check_invariants, linear_costs, random_workload, run_sim


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(["sync", "bounded_async"]),
    rule=st.sampled_from(["continue", "keep_pause", "abort_resume", "abort_restart", "drain"]),
    staleness=st.integers(0, 3),
    instances=st.integers(1, 3),
    kv_policy=st.sampled_from(["reserve", "on_demand"]),
    kv_tokens=st.integers(8_000, 200_000),
    step_s=st.floats(0.5, 20.0),
    router=st.sampled_from(["round_robin", "least_requests", "throughput_balance", "kv_cache_aware"]),
    seed=st.integers(0, 10_000),
)
def test_invariants_hold(policy, rule, staleness, instances, kv_policy, kv_tokens, step_s, router, seed):
    ov = [f"policy={policy}", "policy.batch_groups=4", f"deployment.rollout.instances={instances}",
          f"deployment.rollout.kv_policy={kv_policy}", f"router.name={router}", "run.training_steps=3"]
    if policy == "bounded_async":
        ov += [f"policy.inflight_rule={rule}", f"policy.max_staleness={staleness}"]
    wl = random_workload(groups=20, n=4, seed=seed, prompt=(50, 800), completion=(20, 2500))
    report, sim = run_sim(ov, wl, linear_costs(kv_tokens=kv_tokens, step_s=step_s))
    assert report.diagnosis is None
    check_invariants(report, sim)


def test_same_config_and_seed_give_identical_report():
    wl = random_workload(groups=30)
    ov = ["policy=bounded_async", "policy.max_staleness=1", "deployment.rollout.kv_policy=on_demand"]
    a, _ = run_sim(ov, wl, linear_costs(kv_tokens=60_000, step_s=2))
    b, _ = run_sim(ov, wl, linear_costs(kv_tokens=60_000, step_s=2))
    assert a.to_json() == b.to_json()
