"""The record extension ``zero_variance_holds_slot`` (prime-rl's ``filter_zero_advantages``: zero-advantage groups
keep their batch slot, no backfill) on the JAX fast path (`simrl_fast.trainer.trainer_react`), against SimPy and
against a run worked out by hand.
"""

import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
from diffcases import BASE, Case, compare, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from simrl.policy.params import LoweringContext, PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402
from simrl.policy.rules import InflightRule, code  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

# (completion length L of both calls, zero reward variance) per prompt group
GROUPS = [(100, False), (2, True), (2, True), (2, False), (3, False), (1, True), (1, True), (1, False), (1, False),
          (20, False), (20, False)]


def _case(holds: int) -> Case:
    wl = build_workload("hand", 0, [single_turn_group(g, 2, 100, [L, L], [1.0, 1.0] if z else [0.0, 1.0])
                                    for g, (L, z) in enumerate(GROUPS)])
    # every iteration takes a = 0.01 s (no batch, KV or prefill terms); a step 0.055 s, a publication 0.1 s
    costs = linear_costs(kv_tokens=10**6, step_s=0.055, sync_s=0.1, a=0.01, b=0.0, c=0.0, p=0.0)
    rec = PolicyParams(admit_concurrency_groups=3.0, inflight_rule=code(InflightRule.CONTINUE), fast_path_exact=1,
                       batch_min_groups=2, batch_max_groups=2, drop_zero_variance=1, zero_variance_holds_slot=holds)
    ov = [*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=8", "run.training_steps=2"]
    case = Case(ov, wl, costs, label=f"zero slots {holds}")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


def test_zero_variance_groups_hold_their_place_and_a_batch_of_placeholders_waits_for_a_completion():
    """One instance, at most 3 groups running, batches of 2 places, continue (rollout runs through publications).
    The instance is never idle (g0, L=100, runs throughout), so a call admitted at boundary b (t = b * 0.01) with L
    tokens finishes at boundary b + L and a group dispatched at a boundary is admitted at the next one. Z: a group
    with zero reward variance (dropped; with the field it holds a place).

    t=0     g0 (L=100), g1 (Z, L=2), g2 (Z, L=2) admitted.
    0.02    g1, g2 done: places [Z1, Z2]: a batch of placeholders alone, consumed, no batch (the trainer waits);
            g3 (L=2), g4 (L=3) dispatched, admitted at 0.03.
    0.05    g3 done (place N3); g5 (Z, L=1) admitted at 0.06.
    0.06    g4 done: [N3, N4] -> step 1 trains g3, g4 (0.06 .. 0.115, published 0.215); g6 (Z, L=1) at 0.07.
    0.07    g5 done (Z5); g7 (L=1) at 0.08.   0.08: g6 done (Z6); g8 (L=1) at 0.09.
    0.09    g7 done (N7); g9 (L=20) admitted at 0.10, done at 0.30.
    0.10    g8 done (N8); g10 (L=20) admitted at 0.11, done at 0.31.
    0.215   published: places [Z5, Z6, N7, N8]: the first two are placeholders alone: consumed, no batch, and the
            trainer waits for the next change although [N7, N8] is a whole batch.
    0.30    g9 done: step 2 takes [N7, N8] (0.30 .. 0.355, published 0.455).
    Without the field the zero-variance groups are simply dropped: step 1 is the same, step 2 takes g7, g8 at 0.215.
    """
    holds, drops = _case(1), _case(0)
    holds.run_simpy()
    drops.run_simpy()
    want = {holds: [((3, 4), 0.06, 0.215), ((7, 8), 0.30, 0.455)],
            drops: [((3, 4), 0.06, 0.215), ((7, 8), 0.215, 0.37)]}
    for case, steps in want.items():
        got = [(s.gids, s.batch_ready, s.publish_end) for s in case.report.steps]
        assert [g for g, _, _ in got] == [g for g, _, _ in steps], case.label
        assert [t for _, t, _ in got] == pytest.approx([t for _, t, _ in steps], abs=1e-12), case.label
        assert [t for _, _, t in got] == pytest.approx([t for _, _, t in steps], abs=1e-12), case.label
    res = run_fast([holds, drops])
    compare(holds, res, 0)  # every step and call, times equal
    compare(drops, res, 1)


def test_the_field_needs_fixed_size_fifo_batches_of_dropped_zero_variance_groups():
    with pytest.raises(ValueError, match="zero_variance_holds_slot=1 needs"):
        PolicyParams(zero_variance_holds_slot=1, batch_min_groups=2, batch_max_groups=2)
    with pytest.raises(ValueError, match="zero_variance_holds_slot=1 needs"):
        PolicyParams(zero_variance_holds_slot=1, drop_zero_variance=1, batch_min_groups=1, batch_max_groups=2)


def test_prime_rl_lowers_filter_zero_advantages():
    pol = Case([*BASE, "policy=prime_rl"], None, None).cfg.policy
    rec = pol.lower(LoweringContext(group_size=8, instances=4))
    assert (rec.drop_zero_variance, rec.zero_variance_holds_slot) == (1, 1)
    off = attrs.evolve(pol, filter_zero_advantages=False)
    assert off.lower(LoweringContext(group_size=8, instances=4)).zero_variance_holds_slot == 0


def test_the_field_with_a_ship_barrier_is_accepted():
    # a batch with placeholders takes fewer buffered groups than batch_max_groups, so the barrier's sum moves by
    # another amount when it is taken: the kernel keeps SimPy's order of trainer and dispatcher in an instant
    # (`step.disp_first`; diffscan seed 8202 differed before; tests/fast/test_prime_ship_slots.py by hand)
    from simrl_fast.lowering import policy_rejections

    rec = PolicyParams(zero_variance_holds_slot=1, drop_zero_variance=1, batch_min_groups=2, batch_max_groups=2,
                       admit_concurrency_groups=4.0, fast_path_exact=1, admit_max_ship_lag=1)
    assert policy_rejections(rec, "record") == []
