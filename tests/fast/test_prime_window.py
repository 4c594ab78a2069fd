"""The record extension ``admit_window_episodes`` (prime-rl's dispatcher admission window: W episodes per window,
its start set by the consultation that finds it run out, reopened by the dispatcher's own recheck timeout) on the
JAX fast path (`simrl_fast.step.window_open`, `sleep_timer`, ``A_WINDOW``), against SimPy and against runs worked
out by hand.
"""

import numpy as np
import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
from diffcases import BASE, Case, compare, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from simrl.policy.params import LoweringContext, PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402
from simrl.policy.rules import InflightRule, code  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

# completion lengths (L of trajectory 0, L of trajectory 1) per prompt group; every reward pair has variance
GROUPS = [(7, 7), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1)]


def _case(refund: int, window: int = 2, length: float = 0.05) -> Case:
    wl = build_workload("window", 0, [single_turn_group(g, 2, 100, list(Ls), [0.0, 1.0])
                                      for g, Ls in enumerate(GROUPS)])
    # every iteration takes a = 0.01 s (no batch, KV or prefill terms); a step 0.055 s, a publication 0.1 s
    costs = linear_costs(kv_tokens=10**6, step_s=0.055, sync_s=0.1, a=0.01, b=0.0, c=0.0, p=0.0)
    rec = PolicyParams(admit_concurrency_groups=1.0, inflight_rule=code(InflightRule.CONTINUE), fast_path_exact=1,
                       batch_min_groups=2, batch_max_groups=2, admit_window_episodes=window, admit_window_s=length,
                       admit_window_refund=refund)
    ov = [*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=16", "run.training_steps=2"]
    case = Case(ov, wl, costs, label=f"window {window}/{length} refund={refund}")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


def _dispatch_times(case: Case) -> dict[int, float]:
    return {c.gid: c.arrival for c in case.report.calls if c.turn == 0}


def _late_case() -> Case:
    """The sync shape (budget (version + 1) x 2, admission blocked while training) with zero-variance placeholders and a
    window of one group per u / 2 (u = 2^-7 s, one iteration; `test_a_dispatcher_woken_by_its_timeout_goes_after_the_trainer`)."""
    u = 2.0 ** -7
    wl = build_workload("late", 0, [single_turn_group(g, 2, 100, [1, 1], [1.0, 1.0] if g == 1 else [0.0, 1.0])
                                    for g in range(8)])
    costs = linear_costs(kv_tokens=10**6, step_s=4 * u, sync_s=2 * u, a=u, b=0.0, c=0.0, p=0.0)
    rec = PolicyParams(admit_budget_base_groups=2.0, admit_budget_per_version_groups=2.0, admit_block_while_training=1,
                       inflight_rule=code(InflightRule.CONTINUE), fast_path_exact=1, batch_min_groups=2,
                       batch_max_groups=2, drop_zero_variance=1, zero_variance_holds_slot=1, admit_window_episodes=2,
                       admit_window_s=0.5 * u, admit_window_refund=0)
    ov = [*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=8", "run.training_steps=1"]
    case = Case(ov, wl, costs, label="woken by its timeout")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


@pytest.fixture(scope="module")
def runs():
    """The cases of this module on SimPy, and on the fast path in one batch (one compile)."""
    cases = [_case(0), _case(1), _late_case()]
    for case in cases:
        case.run_simpy()
    return cases, run_fast(cases)


def test_the_window_restarts_where_a_consultation_finds_it_run_out_and_its_timeout_reopens_it(runs):
    """One instance, groups of 2 single-call trajectories, one group running at a time (concurrency 1), a window of
    W = 2 episodes (one group) per 0.05 s, batches of 2 groups, continue. Every iteration takes 0.01 s, so a group
    admitted at t with L tokens finishes at t + L x 0.01 (the instance is idle between groups: admitted at once).

    Without refunds:
    t=0     window [0, .): g0 (7, 7) starts, 2 episodes: spent. Concurrency full: no recheck timeout.
    0.07    g0 done (buffered) wakes the dispatcher: 0.07 - 0 >= 0.05 - 1e-9, the window restarts *here* (not at
            0.05): g1 (1, 1) starts, spent again.
    0.08    g1 done: step 1 takes [g0, g1] (0.08 .. 0.135, published 0.235). The dispatcher reads 0.08 - 0.07 < 0.05
            and W spent: it sleeps with a recheck timeout of 0.07 + 0.05 - 0.08 s, due at 0.12.
    0.12    the timeout wakes it: the window restarts at 0.12, g2 starts (done 0.13; timeout due 0.17).
    0.17    g3 starts (done 0.18; timeout due 0.22). 0.22: g4 starts.
    0.235   published: step 2 takes [g2, g3] (0.235 .. 0.29, published 0.39).
    With refunds every completion takes its 2 episodes back: g1 at 0.07, g2 at 0.08 (g1's completion), g3 at 0.09,
    g4 at 0.10, and step 2 takes [g2, g3] at 0.235 as well.
    """
    (spent, refunded, _), res = runs
    for case, want in ((spent, {0: 0.0, 1: 0.07, 2: 0.12, 3: 0.17, 4: 0.22}),
                       (refunded, {0: 0.0, 1: 0.07, 2: 0.08, 3: 0.09, 4: 0.10})):
        disp = _dispatch_times(case)
        assert {g: disp[g] for g in want} == pytest.approx(want, abs=1e-12), case.label
        got = [(s.gids, s.batch_ready, s.publish_end) for s in case.report.steps]
        assert [g for g, _, _ in got] == [(0, 1), (2, 3)]
        assert [t for _, t, _ in got] == pytest.approx([0.08, 0.235], abs=1e-12)
        assert [t for _, _, t in got] == pytest.approx([0.235, 0.39], abs=1e-12)
    compare(spent, res, 0)  # every step and call, times equal
    compare(refunded, res, 1)


def test_a_dispatcher_woken_by_its_timeout_goes_after_the_trainer(runs):
    """SimPy's dispatcher sleeps on ``changed.wait() | timeout`` while the window alone holds admission. Woken by the
    timeout, it waits on ``changed.wait()`` again: the same pending event, its callback now after the trainer's, so
    the next notify runs the trainer first, even before the first batch (`SimState.disp_late`, `step.disp_first`;
    diffscan seed 19021: the fast path admitted a group in the instant of the first batch, before its training
    blocked admission). Units of u = 2^-7 s, one iteration; every call 1 token.

    t=0     g0 (varied) starts: count 1 < 2, the window (2 episodes per u/2) spent: a recheck timeout at u/2.
    u/2     the timeout: the window restarts, g1 (zero variance) starts (count 2: the budget holds, no timeout);
            routed to the busy instance, admitted at its boundary u.
    u       g0 done (accepted): places [N0], no batch; count 1 + 1 = 2.
    2u      g1 done, dropped, its place held: [N0, Z1] is batch 1 (trains g0), count 1 + 0 = 1 < 2 and the window
            has run its length. The trainer first: it takes the batch and trains (2u .. 6u, published 8u); the
            dispatcher then finds admission blocked while training. (Dispatcher first, g2 would start at 2u.)
    """
    (_, _, late), res = runs
    u = 2.0 ** -7
    rep = late.report
    assert _dispatch_times(late) == {0: 0.0, 1: 0.5 * u}  # no group started at 2u
    assert [(s.gids, s.batch_ready, s.train_end, s.publish_end) for s in rep.steps] == [((0,), 2 * u, 6 * u, 8 * u)]
    assert res.call_finish[2, :4].tolist() == [u, u, 2 * u, 2 * u]
    assert np.isnan(res.call_finish[2, 4:]).all()
    compare(late, res, 2)


def test_the_window_must_be_one_episode_or_more_and_last():
    with pytest.raises(ValueError, match="admit_window_episodes=0"):
        PolicyParams(admit_window_episodes=0, admit_window_s=5.0)
    with pytest.raises(ValueError, match="admit_window_s=0.0"):
        PolicyParams(admit_window_episodes=8)
    with pytest.raises(ValueError, match="admit_window_refund=2"):
        PolicyParams(admit_window_episodes=8, admit_window_s=5.0, admit_window_refund=2)


def test_prime_rl_lowers_its_window_at_the_starting_cap():
    pol = Case([*BASE, "policy=prime_rl"], None, None).cfg.policy
    ctx = LoweringContext(group_size=8, instances=4)
    rec = pol.lower(ctx)
    # max(group size, cap // 10) episodes per 5 s, refunded under AIMD: cap 1 (min_inflight) -> 8; cap 200 -> 20
    assert (rec.admit_window_episodes, rec.admit_window_s, rec.admit_window_refund) == (8, 5.0, 1)
    assert attrs.evolve(pol, initial_inflight=200).lower(ctx).admit_window_episodes == 20
    assert attrs.evolve(pol, concurrency_control="kappa_ewma", max_inflight=None).lower(ctx).admit_window_refund == 0
    assert not any("admission window reopened" in g for g in pol.fast_path_gaps)


def test_per_instance_sync_with_a_window_is_refused_by_name():
    from simrl_fast.lowering import FastPathUnsupported, lower

    case = _case(1)
    # the sync shape's admission (budget (version + 1) x batch), which per-instance sync needs, and a window
    rec = attrs.evolve(case.cfg.policy.params_record, sync_per_instance=1, route_needs_dispatch_version=1,
                       admit_concurrency_groups=float("inf"), admit_budget_base_groups=2.0,
                       admit_budget_per_version_groups=2.0)
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    with pytest.raises(FastPathUnsupported, match="admission window"):
        lower(case.cfg, case.workload, case.costs)
