"""A ship barrier (``admit_max_ship_lag``) with zero-variance placeholders (``zero_variance_holds_slot``), prime-rl's
pair at its defaults, on the JAX fast path against SimPy and against a run worked out by hand.

A batch with placeholders takes fewer than ``batch`` buffered groups, so taking it raises the barrier's sum
(batches taken - version + buffered // batch): whether the dispatcher reads the sum before or after the trainer
takes the batch decides admission. SimPy's order (`step.disp_first`): the dispatcher first while the trainer
waits for its first batch, the trainer first for every later one.
"""

import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
from diffcases import BASE, Case, compare, dispatch_times, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from simrl.policy.params import PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402
from simrl.policy.rules import InflightRule, code  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

# (completion length L of both calls, zero reward variance) per prompt group
GROUPS = [(100, False), (1, True), (2, False), (3, True), (20, False), (50, False), (1, False), (1, False)]


def _case(lag: int) -> Case:
    wl = build_workload("hand", 0, [single_turn_group(g, 2, 100, [L, L], [1.0, 1.0] if z else [0.0, 1.0])
                                    for g, (L, z) in enumerate(GROUPS)])
    # every iteration takes a = 0.01 s (no batch, KV or prefill terms); a step 0.055 s, a publication 0.1 s
    costs = linear_costs(kv_tokens=10**6, step_s=0.055, sync_s=0.1, a=0.01, b=0.0, c=0.0, p=0.0)
    rec = PolicyParams(admit_concurrency_groups=3.0, inflight_rule=code(InflightRule.CONTINUE), fast_path_exact=1,
                       batch_min_groups=2, batch_max_groups=2, drop_zero_variance=1, zero_variance_holds_slot=1,
                       admit_max_ship_lag=lag)
    ov = [*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=8", "run.training_steps=3"]
    case = Case(ov, wl, costs, label=f"ship lag {lag} with zero slots")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


def test_the_dispatcher_reads_the_barrier_before_the_first_batch_and_after_every_later_one():
    """One instance, at most 3 groups running, batches of 2 places, lag 0 (admit while taken - version +
    buffered // 2 <= 0), continue. g0 (L=100) keeps the instance busy, so a call admitted at boundary b
    (t = b x 0.01) with L tokens finishes at boundary b + L and a group dispatched between boundaries is admitted
    at the next one. Z: zero reward variance (a placeholder), N: trained.

    t=0      g0, g1 (Z, L=1), g2 (N, L=2) dispatched and admitted (sum 0 - 0 + 0 = 0).
    0.01     g1 done: places [Z1]; g3 (Z, L=3) dispatched (2 running), admitted 0.02.
    0.02     g2 done: places [Z1, N2] make batch 1. The trainer waits for its first batch, so the dispatcher runs
             first: sum 0 - 0 + 1 // 2 = 0, g4 (N, L=20) dispatched (admitted 0.03, done 0.23). Then the trainer
             takes [Z1, N2] and trains g2 (0.02 .. 0.075, published 0.175): sum 1 - 0 + 0 = 1, closed.
    0.05     g3 done: places [Z3]; sum 1, closed.
    0.175    published (version 1): sum 1 - 1 + 0 = 0: g5 (N, L=50) dispatched (3 running), admitted 0.18.
    0.23     g4 done: places [Z3, N4] make batch 2. The trainer waits first since step 1's publication: it takes the
             batch (sum 2 - 1 + 0 = 1) before the dispatcher reads the sum, so nothing starts (with the
             dispatcher first, sum 1 - 1 + 1 // 2 = 0 would have started g6 at 0.23). Trains g4 (0.23 .. 0.285,
             published 0.385).
    0.385    published (version 2): sum 2 - 2 + 0 = 0: g6 (N, L=1) dispatched, admitted 0.39, done 0.40.
    0.40     g6 buffered (places [N6]): sum 2 - 2 + 1 // 2 = 0, g7 (N, L=1) dispatched, admitted 0.41, done 0.42.
    0.42     [N6, N7] make batch 3 (0.42 .. 0.475, published 0.575).
    """
    case = _case(0)
    case.run_simpy()
    rep = case.report
    got = [(s.gids, s.batch_ready, s.publish_end) for s in rep.steps]
    assert [g for g, _, _ in got] == [(2,), (4,), (6, 7)]
    assert [t for _, t, _ in got] == pytest.approx([0.02, 0.23, 0.42], abs=1e-12)
    assert [t for _, _, t in got] == pytest.approx([0.175, 0.385, 0.575], abs=1e-12)
    disp = dispatch_times(rep)  # (g0 and g5 are still running at the end: no finished call)
    assert sorted(disp) == [1, 2, 3, 4, 6, 7]
    assert [disp[g] for g in sorted(disp)] == pytest.approx([0, 0, 0.01, 0.02, 0.385, 0.40], abs=1e-12)
    res = run_fast([case])
    compare(case, res, 0)  # every step and call, times equal


def _sync_case() -> Case:
    # rewards: g0 zero variance (a placeholder), the rest varied; every call 1 token
    wl = build_workload("hand sync", 0, [single_turn_group(g, 2, 100, [1, 1], [1.0, 1.0] if g == 0 else [0.0, 1.0])
                                         for g in range(8)])
    costs = linear_costs(kv_tokens=10**6, step_s=0.055, sync_s=0.1, a=0.01, b=0.0, c=0.0, p=0.0)
    rec = PolicyParams(admit_budget_base_groups=2.0, admit_budget_per_version_groups=2.0, admit_block_while_training=1,
                       inflight_rule=code(InflightRule.CONTINUE), fast_path_exact=1, batch_min_groups=2,
                       batch_max_groups=2, drop_zero_variance=1, zero_variance_holds_slot=1)
    ov = [*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=8", "run.training_steps=2"]
    case = Case(ov, wl, costs, label="sync shape with zero slots")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


def test_the_sync_shape_with_placeholders_admits_before_the_first_batch_blocks_it():
    """The sync shape (budget (version + 1) x 2 counting accepted + running, admission blocked while training) with
    placeholders: a batch of places can form while accepted + running < the budget, and training closes admission,
    so the order matters here too (diffscan seed 11023 differed). One instance, every call 1 token (0.01 s).

    t=0      g0 (Z), g1 (N) dispatched (count 0, 1 < 2) and admitted; both done at 0.01, in rid order.
    0.01     places [Z0, N1] make batch 1, accepted 1 + running 0 = 1 < 2: the dispatcher goes first (step 1)
             and starts g2 (done 0.02); then the trainer takes the batch (trains g1, 0.01 .. 0.065, published
             0.165), and training blocks admission.
    0.165    version 1, budget 4, count 2 (g1, g2 accepted): g3, g4 start, both done at 0.175.
    0.175    [N2, N3] make batch 2 (0.175 .. 0.23, published 0.33).
    With the trainer first at 0.01 g2 would start only at 0.165."""
    case = _sync_case()
    case.run_simpy()
    rep = case.report
    assert [(s.gids, s.batch_ready, s.publish_end) for s in rep.steps] == [
        ((1,), pytest.approx(0.01, abs=1e-12), pytest.approx(0.165, abs=1e-12)),
        ((2, 3), pytest.approx(0.175, abs=1e-12), pytest.approx(0.33, abs=1e-12))]
    disp = dispatch_times(rep)
    assert [disp[g] for g in range(5)] == pytest.approx([0, 0, 0.01, 0.165, 0.165], abs=1e-12)
    compare(case, run_fast([case]), 0)
