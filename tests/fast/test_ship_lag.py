"""The record extension ``admit_max_ship_lag`` (a ship barrier, prime-rl's ``TARGET_LAG``): SimPy's
`RecordPolicy` and the kernel's `step.can_dispatch`, by hand and against each other.

A group may start only while batches taken - version + buffered // batch <= the lag.
"""

import attrs
import pytest

pytest.importorskip("jax")

from diffcases import BASE, Case, compare, dispatch_times, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from simrl.policy.params import LoweringContext, PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402
from simrl.policy.rules import InflightRule, code  # noqa: E402
from simrl_fast.lowering import FastPathUnsupported, policy_rejections  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

STEPS = 3


def _workload():
    # groups of 2 calls, prompt 100; completions (tokens): g0 10, g1 20, g2 50, the rest 10
    comps = [[10, 10], [20, 20], [50, 50]] + [[10, 10]] * 5
    return build_workload("ship", 0, [single_turn_group(g, 2, 100, c, [0.0, 1.0]) for g, c in enumerate(comps)])


def _case(lag: int) -> Case:
    rec = PolicyParams(admit_concurrency_groups=2.0, inflight_rule=code(InflightRule.CONTINUE), batch_min_groups=1,
                       batch_max_groups=1, fast_path_exact=1, admit_max_ship_lag=lag)
    # one instance, 0.01 s per iteration: every call of a group runs at once and finishes within a second;
    # a training step takes 5 s and a publication 0.5 s, so rollout is far ahead of training
    costs = linear_costs(kv_tokens=10**5, step_s=5.0, sync_s=0.5, a=0.01, b=0.0, c=0.0, p=0.0)
    case = Case([*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=8",
                 f"run.training_steps={STEPS}"], _workload(), costs, label=f"lag={lag}")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


def test_the_ship_barrier_holds_dispatch_until_the_lag_allows_it_in_both_engines():
    """By hand (concurrency 2 groups, batches of 1 group, lag 1; shipped = taken - version + buffered):

    t=0: g0 and g1 start (shipped 0 - 0 + 0 = 0 <= 1, running 0 then 1 < 2). g0 (10 tokens) finishes
    first: the trainer takes it (shipped 1 - 0 + 0 = 1 <= 1) and g2 starts at once. g1 (20 tokens)
    finishes next: buffered, shipped 1 - 0 + 1 = 2 > 1, so no group starts though only g2 runs; g2
    finishes (shipped 3, nothing running). Step 1 publishes (version 1) and the trainer takes g1:
    shipped 2 - 1 + 1 = 2, still closed. Step 2 publishes (version 2) and the trainer takes g2:
    shipped 3 - 2 + 0 = 1, so g3 and g4 start at step 2's publish_end. Steps train g0, g1, g2.
    Without the barrier (lag -1) g3 starts when g1 finishes, well before step 1 ends."""
    lagged, free = _case(1), _case(-1)
    for c in (lagged, free):
        c.run_simpy()
        assert c.report.diagnosis is None and len(c.report.steps) == STEPS
    rep = lagged.report
    d = dispatch_times(rep)
    assert d[0] == d[1] == 0.0
    g0_done = max(c.finish for c in rep.calls if c.gid == 0)
    g1_done = max(c.finish for c in rep.calls if c.gid == 1)
    assert d[2] == g0_done < g1_done
    assert d[3] == d[4] == rep.steps[1].publish_end
    assert [s.gids for s in rep.steps] == [(0,), (1,), (2,)]
    # staleness: g1 and g2 were generated under version 0, trained at versions 1 and 2
    assert rep.steps[1].staleness == (1,) and rep.steps[2].staleness == (2,)
    d_free = dispatch_times(free.report)
    assert d_free[3] == max(c.finish for c in free.report.calls if c.gid == 1) < free.report.steps[0].train_end
    # the kernel: the same steps, calls and times, exactly
    res = run_fast([lagged, free])
    compare(lagged, res, 0)
    compare(free, res, 1)


def test_the_ship_barrier_needs_fixed_size_batches():
    rec = PolicyParams(admit_concurrency_groups=4.0, batch_min_groups=2, batch_max_groups=3, fast_path_exact=1,
                       admit_max_ship_lag=1)
    reasons = policy_rejections(rec, "record")
    assert any("admit_max_ship_lag" in r and "variable batch sizes" in r for r in reasons)
    with pytest.raises(ValueError, match="admit_max_ship_lag=-2"):
        PolicyParams(admit_max_ship_lag=-2)


def test_prime_rl_lowers_its_ship_barrier_and_names_what_the_record_cannot_hold():
    case = Case([*BASE, "policy=prime_rl"], None, None)
    pol = case.cfg.policy
    rec = pol.lower(LoweringContext(group_size=8, instances=4))
    assert rec.admit_max_ship_lag == 1 and rec.batch_min_groups == rec.batch_max_groups == 32  # 256 samples / 8
    assert rec.fast_path_exact == 0
    from simrl_fast.lowering import lower_policy

    with pytest.raises(FastPathUnsupported) as exc:
        lower_policy(pol, LoweringContext(group_size=8, instances=4))
    msg = str(exc.value)
    for knob in ("policy.concurrency_control=aimd", "policy.poll_interval_s"):
        assert knob in msg, knob
    # the admission window is in the record (admit_window_episodes; tests/fast/test_prime_window.py)
    assert rec.admit_window_episodes >= 1 and "recheck_in" not in msg
    # the zero-advantage threshold and stop are in the record (tests/fast/test_prime_zero_stop.py)
    assert rec.zero_variance_stop_groups == 320 and "filter_zero_advantages" not in msg
    # the episode permits read at wake-ups are in the record (admit_episode_cap; tests/fast/test_prime_permits.py)
    assert rec.admit_episode_cap >= 1 and "episode permits" not in msg
    # max_off_policy_steps is in the record (abort_stale_on_publish; tests/fast/test_prime_stale_abort.py)
    assert rec.abort_stale_on_publish == 1 and "max_off_policy_steps" not in msg
