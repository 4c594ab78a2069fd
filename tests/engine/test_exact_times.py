"""Iteration ends in closed form, scheduled at absolute times (docs/model.md, "Rollout instance")."""

import attrs
import pytest
import simpy
from simhelpers import linear_costs, run_sim

from simrl.cost.roofline import RooflineRollout
from simrl.engine.instance import boundary_time, timeout_at
from workloads.types import build_workload, single_turn_group


def _one_call(P, L, costs, rollout_knobs=()):
    wl = build_workload("one", 0, [single_turn_group(0, 2, P, [L, L], [0.0, 1.0])])
    report, _ = run_sim(["policy=sync", "policy.batch_groups=1", "deployment.rollout.instances=1",
                         "deployment.rollout.max_num_seqs=1", "deployment.rollout.max_num_batched_tokens=0",
                         "deployment.rollout.prefix_caching=false", "run.training_steps=1", *rollout_knobs],
                        wl, costs)
    return report


def test_iteration_ends_come_from_the_closed_form_not_a_running_sum():
    # One instance, max_num_seqs=1: the first call (prompt P=100, L=5 tokens) runs alone from t=0.
    # a=0.01, b=0.001, c=1e-5, p=1e-4. Anchor iteration (prefill 100): dt0 = a + p*100 = 0.02, so the
    # first token at t1 = 0.02. Then 1 decoding sequence with K1 = 100 + 1 KV tokens:
    # alpha = a + b*1 + c*101 = 0.01201, beta = c*1 = 1e-5 (one more KV token per iteration).
    # 5th token at T(4) = t1 + 4*alpha + beta*4*3/2 = 0.02 + 0.04804 + 0.00006 = 0.0681.
    a, b, c, p = 0.01, 0.001, 1e-5, 1e-4
    report = _one_call(100, 5, linear_costs(a=a, b=b, c=c, p=p))
    first = min(report.calls, key=lambda x: x.finish)
    closed = boundary_time(a + b * 0 + c * 0 + p * 100, a + b * 1 + c * 101 + p * 0, c * 1, 4.0)
    assert first.finish == closed == pytest.approx(0.0681, rel=1e-12)
    # Summing the iteration times one by one rounds differently here (0.0681 vs 0.06810000000000001):
    running = a + p * 100
    for j in range(1, 5):
        running += a + b + c * (100 + j)
    assert running != closed


def test_timeout_at_fires_at_the_absolute_time():
    env = simpy.Environment()
    now, t = 0.2, 0.9
    assert now + (t - now) != t  # 0.9 - 0.2 = 0.7 (rounded); 0.2 + 0.7 = 0.8999999999999999
    seen = []

    def proc():
        yield env.timeout(now)
        yield timeout_at(env, t)
        seen.append(env.now)

    env.process(proc())
    env.run()
    assert seen == [t]
    with pytest.raises(ValueError, match="before now"):
        timeout_at(env, 0.5)  # now is 0.9


def test_linear_kv_slope_is_c():
    assert linear_costs(c=3e-8).rollout.kv_slope(17) == 3e-8


def test_roofline_kv_slope_is_the_growth_per_kv_token_and_none_where_not_affine():
    r = RooflineRollout("qwen3-8b", "H100", tp=2)
    for B in (1, 8, 64):
        K = 2_000 * B
        slope = r.kv_slope(B)
        grown = r.iteration_time(B, K + 100 * B, 0) - r.iteration_time(B, K, 0)
        assert slope > 0 and grown == pytest.approx(100 * B * slope, rel=1e-9)
    assert RooflineRollout("qwen3-8b", "H100", enforce_eager=True).kv_slope(8) is None  # max(GPU, host)
    assert RooflineRollout("gpt-oss-20b", "H100").kv_slope(8) is None  # sliding-window layers


def test_models_without_a_kv_slope_sum_iteration_times():
    class NoSlope:  # the linear form without kv_slope: SimPy ends every iteration at now + dt
        def __init__(self, inner):
            self.inner, self.domain = inner, inner.domain

        def iteration_time(self, b, kv, pf):
            return self.inner.iteration_time(b, kv, pf)

        def kv_capacity_tokens(self):
            return self.inner.kv_capacity_tokens()

    a, b, c, p = 0.01, 0.001, 1e-5, 1e-4
    costs = linear_costs(a=a, b=b, c=c, p=p)
    costs = attrs.evolve(costs, rollout=NoSlope(costs.rollout))
    report = _one_call(100, 5, costs)
    running = a + p * 100
    for j in range(1, 5):
        running += a + b + c * (100 + j)
    assert min(x.finish for x in report.calls) == running
