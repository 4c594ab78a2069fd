"""Group slots sized from an episode cap (``admit_episode_cap``) where a record has no concurrency cap and no
budget (prime-rl's admission: episode permits and a ship barrier): `lowering.group_bound`, by hand and on a run
of both engines.
"""

import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
import numpy as np  # noqa: E402
from diffcases import BASE, Case, compare, dispatch_times, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from simrl.policy.params import LoweringContext, PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402
from simrl.policy.rules import InflightRule, code  # noqa: E402
from simrl_fast import lower  # noqa: E402
from simrl_fast.grid import static_for_stacked  # noqa: E402
from simrl_fast.lowering import group_bound, policy_rejections, stack_params, static_for  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

STEPS = 3


def _workload():
    # groups of 2 calls, prompt 100; completions (tokens): g0 10, g1 20, g2 50, the rest 10
    comps = [[10, 10], [20, 20], [50, 50]] + [[10, 10]] * 5
    return build_workload("permits", 0, [single_turn_group(g, 2, 100, c, [0.0, 1.0]) for g, c in enumerate(comps)])


def _case(lag: int, cap: int = 3) -> Case:
    # no concurrency cap and no budget: only the episode cap bounds the groups running
    rec = PolicyParams(inflight_rule=code(InflightRule.CONTINUE), batch_min_groups=1, batch_max_groups=1,
                       fast_path_exact=1, admit_max_ship_lag=lag, admit_episode_cap=cap)
    costs = linear_costs(kv_tokens=10**5, step_s=5.0, sync_s=0.5, a=0.01, b=0.0, c=0.0, p=0.0)
    case = Case([*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=8",
                 f"run.training_steps={STEPS}"], _workload(), costs, label=f"lag={lag} cap={cap}")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


def test_the_bound_by_hand():
    """3 steps of 1 group, episode cap E = 3 (groups of 2: at most 2 groups running: u = 0 -> start, u = 2 < 3 ->
    start, u = 4 holds; `running_at_once` is the looser E = 3), lag L = 1: trained 3 x 1, buffered + running at most
    (L + 1) x 1 - 1 + 3 = 4, so 7 groups, plus one batch of slack: 8. Without the barrier the buffer is not bounded
    by admission: 3 + 2 x 3 x 1 = 9, plus 1: 10. With running groups aborted at publications (stale_abort) each of
    the 3 publications may abort 3 more: 7 + 9 + 1 = 17."""
    _, p, _ = lower(_case(1).cfg, _workload(), _case(1).costs)
    assert group_bound(p) == 8
    assert group_bound(p._replace(ship_lag=np.int32(-1))) == 10
    assert group_bound(p._replace(stale_abort=np.int32(1))) == 17
    assert group_bound(p._replace(ep_cap=np.int32(-1), conc=np.float64(2.0))) == 3 + 2 * 1 - 1 + 2 + 1  # a cap of 2
    # the grid's vectorised bound reads the same fields (the episode cap, the lag, aborts at publications)
    rows = [p, p._replace(stale_abort=np.int32(1)), p._replace(ship_lag=np.int32(-1))]
    assert static_for_stacked(stack_params(rows), _workload_arrays()).max_groups == 17
    assert static_for(rows, _workload_arrays()).max_groups == 17


def _workload_arrays():
    return lower(_case(1).cfg, _workload(), _case(1).costs)[2]


def test_an_episode_cap_bounds_admission_in_the_record_and_the_kernel():
    rec = PolicyParams(fast_path_exact=1, admit_episode_cap=4)
    assert not any("unbounded admission" in r for r in policy_rejections(rec, "record"))
    ParamsPolicy(rec)  # accepted by SimPy's record policy too
    bare = attrs.evolve(rec, admit_episode_cap=-1)
    assert any("unbounded admission" in r for r in policy_rejections(bare, "record"))
    with pytest.raises(ValueError, match="unbounded admission"):
        ParamsPolicy(bare)
    # prime_rl's record at its defaults: no longer refused for its admission
    pol = Case([*BASE, "policy=prime_rl"], None, None).cfg.policy
    reasons = policy_rejections(pol.lower(LoweringContext(group_size=8, instances=4)), "prime_rl")
    assert reasons and not any("unbounded admission" in r for r in reasons)


def test_a_run_bounded_by_the_episode_cap_alone_fits_its_slots():
    """tests/fast/test_ship_lag.py's run with the concurrency cap of 2 groups replaced by an episode cap of 3
    trajectories: both trajectories of a group finish at the same boundary (equal lengths), so a group's two
    permits come back at its completion, a wake-up, and u = 0 or 2 admits, u = 4 holds: at most 2 groups run, as
    with the cap. So (lag 1) g0 and g1 start at 0, g2 when g0 finishes (the trainer takes it: shipped 1 - 0 + 0),
    nothing when g1 finishes (shipped 2), g3 and g4 at step 2's publication; steps train g0, g1, g2. The slots
    (8) hold the 5 groups dispatched, with no overflow, and the kernel matches SimPy exactly."""
    lagged = _case(1)
    lagged.run_simpy()
    assert lagged.report.diagnosis is None and len(lagged.report.steps) == STEPS
    rep = lagged.report
    d = dispatch_times(rep)
    g0_done = max(c.finish for c in rep.calls if c.gid == 0)
    assert d[0] == d[1] == 0.0 and d[2] == g0_done
    assert d[3] == d[4] == rep.steps[1].publish_end
    assert [s.gids for s in rep.steps] == [(0,), (1,), (2,)]
    res = run_fast([lagged])
    assert not res.overflow.any() and int(res.groups_dispatched[0]) == 5
    assert group_bound(lower(lagged.cfg, lagged.workload, lagged.costs)[1]) == 8
    compare(lagged, res, 0)
