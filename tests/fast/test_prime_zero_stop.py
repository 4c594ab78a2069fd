"""prime-rl's zero-advantage test and stop as record fields: ``zero_variance_std_max`` (a group has zero reward
variance at std <= it; prime-rl's ``filter_zero_advantages`` uses 1e-12) and ``zero_variance_stop_groups`` (the run
stops after n zero-variance groups in a row), in SimPy's `RecordPolicy` and on the JAX fast path (`SimState.zrow`),
by hand and against each other.
"""

import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
from diffcases import BASE, Case, compare  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from simrl.engine.errors import SimulationError  # noqa: E402
from simrl.engine.sim import build_simulation  # noqa: E402
from simrl.policy.params import LoweringContext, PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy, zero_stop_message  # noqa: E402
from simrl.policy.rules import InflightRule, code  # noqa: E402
from simrl_fast import lower  # noqa: E402
from simrl_fast.engine import check_zero_stop, run_params  # noqa: E402
from simrl_fast.lowering import FastPathNoProgress  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

# rewards per prompt group: N varied, T a tiny spread (std 5e-14: zero at 1e-12, not at 0)
N, T = [0.0, 1.0], [1.0, 1.0 + 1e-13]
REWARDS = [N, T, T, N, T, T, T, N]


def _case(tol: float, stop: int) -> Case:
    wl = build_workload("tiny", 0, [single_turn_group(g, 2, 100, [1, 1], r) for g, r in enumerate(REWARDS)])
    # every iteration takes a = 0.01 s; a step 0.5 s, a publication 0.1 s
    costs = linear_costs(kv_tokens=10**6, step_s=0.5, sync_s=0.1, a=0.01, b=0.0, c=0.0, p=0.0)
    rec = PolicyParams(admit_concurrency_groups=1.0, inflight_rule=code(InflightRule.CONTINUE), fast_path_exact=1,
                       batch_min_groups=1, batch_max_groups=1, drop_zero_variance=1, zero_variance_std_max=tol,
                       zero_variance_stop_groups=stop)
    ov = [*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=8", "run.training_steps=2"]
    case = Case(ov, wl, costs, label=f"tol={tol:g} stop={stop}")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


@pytest.mark.slow  # one compile of its own, ~2 min of a CI worker; random_case and wide_case draw the fields in CI
def test_the_threshold_and_the_stop_by_hand():
    """One instance, one group at a time (concurrency 1), batches of 1 group; every call has 1 token, so a group
    runs one 0.01 s iteration, and the next starts at its completion: g_k is done at (k + 1) x 0.01.

    std == 0 (tol 0): every group is kept; step 1 trains g0 (0.01 .. 0.51, published 0.61), step 2 g1 (buffered at
    0.02; 0.61 .. 1.11, published 1.21).
    std <= 1e-12: g1, g2 are dropped (T), g3 is buffered at 0.04, so step 2 trains g3 (0.61 .. 1.21).
    The same with a stop after 3 in a row: g1, g2 make 2, g3 restarts the count, g4, g5, g6 make 3: the run stops
    at g6's completion (0.07) with the record's message, in both engines."""
    exact, tiny, stop = _case(0.0, 0), _case(1e-12, 0), _case(1e-12, 3)
    for case, gids in ((exact, [(0,), (1,)]), (tiny, [(0,), (3,)])):
        case.run_simpy()
        rep = case.report
        assert [s.gids for s in rep.steps] == gids, case.label
        assert [s.batch_ready for s in rep.steps] == pytest.approx([0.01, 0.61], abs=1e-12)
        assert [s.publish_end for s in rep.steps] == pytest.approx([0.61, 1.21], abs=1e-12)
    with pytest.raises(SimulationError) as simpy_err:  # SimPy's run stops with the record's error
        build_simulation(stop.cfg, stop.workload, stop.costs).run()
    msg = zero_stop_message(3, 1e-12)
    assert str(simpy_err.value) == msg
    stop.run_simpy()  # (the generators' way: the error kept as Case.stopped)
    assert stop.stopped == msg and stop.report is None
    # one batch, one compile (16 group slots: the dropped groups would overflow the 6 sized from concurrency 1 and
    # grow the slots, one compile each): the fast path stops the configuration at the same group
    lowered = [lower(c.cfg, c.workload, c.costs) for c in (exact, tiny, stop)]
    ps, was = [p for _, p, _ in lowered], [wa for _, _, wa in lowered]
    res = run_params(ps, was, max_groups=16, stops=False)
    compare(exact, res, 0)  # every step and call, times equal
    compare(tiny, res, 1)
    assert res.zero_stop.tolist() == [False, False, True]
    compare(stop, res, 2)  # (the generators' way: the stop as a flag, compared with SimPy's error)
    # it stopped at g6's completion: 7 groups dispatched (one at a time), the last one finished at 0.07
    assert int(res.groups_dispatched[2]) == 7 and float(res.group_finish[2, 6]) == pytest.approx(0.07, abs=1e-12)
    # and raises the same diagnosis, naming the configuration (run_params' default)
    with pytest.raises(FastPathNoProgress) as fast_err:
        check_zero_stop(ps, res)
    assert str(fast_err.value).endswith(msg) and "configuration 2 " in str(fast_err.value)


def test_the_fields_are_checked():
    with pytest.raises(ValueError, match="zero_variance_stop_groups > 0 needs drop_zero_variance"):
        PolicyParams(zero_variance_stop_groups=3)
    with pytest.raises(ValueError, match="zero_variance_std_max=-1"):
        PolicyParams(zero_variance_std_max=-1.0)


def test_prime_rl_lowers_its_zero_advantage_test_and_stop():
    pol = Case([*BASE, "policy=prime_rl"], None, None).cfg.policy
    rec = pol.lower(LoweringContext(group_size=8, instances=4))
    assert (rec.zero_variance_std_max, rec.zero_variance_stop_groups) == (1e-12, 10 * 32)  # 256 samples / 8
    assert not any("zero-advantage" in g for g in pol.fast_path_gaps)
    off = attrs.evolve(pol, filter_zero_advantages=False).lower(LoweringContext(group_size=8, instances=4))
    assert (off.zero_variance_std_max, off.zero_variance_stop_groups) == (0.0, 0)
