"""The record extension ``admit_episode_cap`` (prime-rl's episode permits: unfinished trajectories of running
groups below a cap, read only when the dispatcher wakes) on the JAX fast path (`simrl_fast.step.episode_permit`,
`SimState.wake`), against SimPy and against a run worked out by hand.
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

# completion lengths (L of trajectory 0, L of trajectory 1) per prompt group; every reward pair has variance
GROUPS = [(100, 1), (3, 3), (1, 1), (2, 4), (1, 1), (1, 1), (1, 1), (1, 1)]


def _case(cap: int) -> Case:
    wl = build_workload("permits", 0, [single_turn_group(g, 2, 100, list(Ls), [0.0, 1.0])
                                       for g, Ls in enumerate(GROUPS)])
    # every iteration takes a = 0.01 s (no batch, KV or prefill terms); a step 0.055 s, a publication 0.1 s
    costs = linear_costs(kv_tokens=10**6, step_s=0.055, sync_s=0.1, a=0.01, b=0.0, c=0.0, p=0.0)
    rec = PolicyParams(admit_concurrency_groups=10.0, inflight_rule=code(InflightRule.CONTINUE), fast_path_exact=1,
                       batch_min_groups=2, batch_max_groups=2, admit_episode_cap=cap)
    ov = [*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=16", "run.training_steps=2"]
    case = Case(ov, wl, costs, label=f"episode cap {cap}")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


def _dispatch_times(case: Case) -> dict[int, float]:
    return {c.gid: c.arrival for c in case.report.calls if c.turn == 0}


def test_a_finished_trajectory_frees_its_permit_at_the_next_wake_up():
    """One instance, groups of 2 single-call trajectories, at most 4 unfinished trajectories (the cap), batches of 2
    groups, continue. The instance is never idle (g0's first trajectory, L=100, runs throughout), so a call admitted
    at boundary b (t = b * 0.01) with L tokens finishes at boundary b + L, and a group dispatched while it is busy is
    admitted at the next boundary. u: unfinished trajectories when the dispatcher reads them.

    t=0     the dispatcher starts: u=0 -> g0 (100, 1); u=2 -> g1 (3, 3); u=4: holds. Both admitted at once (the
            instance was idle).
    0.01    g0's second trajectory finishes: u=3 < 4, but a finish does not wake the dispatcher: nothing starts.
    0.03    g1 done (buffered) wakes it: u=1 -> g2 (1, 1); u=3 -> g3 (2, 4); u=5: holds. Admitted at 0.04.
    0.05    g2 done: step 1 takes [g1, g2] (trained 0.05 .. 0.105, published 0.205); u=3 -> g4 (1, 1); u=5.
    0.06    g3's first trajectory finishes: u=4, no wake.
    0.07    g4 done: u=2 -> g5 (1, 1); u=4. Admitted at 0.08.
    0.08    g3 done (its L=4 trajectory): u=3 -> g6; u=5. g5 admitted now finishes at 0.09, g6 (admitted 0.09) at 0.10.
    0.09    g5 done: u=3 -> g7; u=5.   0.10: g6 done: u=3 -> g8 ...
    0.205   published: step 2 takes the first two buffered groups, [g4, g3] (0.205 .. 0.26, published 0.36).
    Without the cap-at-wake-ups rule (the cap read after every finish) g2 would start at 0.01.
    """
    case = _case(4)
    case.run_simpy()
    disp = _dispatch_times(case)
    want = {0: 0.0, 1: 0.0, 2: 0.03, 3: 0.03, 4: 0.05, 5: 0.07, 6: 0.08, 7: 0.09}
    assert {g: disp[g] for g in want} == pytest.approx(want, abs=1e-12)
    got = [(s.gids, s.batch_ready, s.publish_end) for s in case.report.steps]
    assert [g for g, _, _ in got] == [(1, 2), (4, 3)]
    assert [t for _, t, _ in got] == pytest.approx([0.05, 0.205], abs=1e-12)
    assert [t for _, _, t in got] == pytest.approx([0.205, 0.36], abs=1e-12)
    free = _case(-1)
    free.run_simpy()
    res = run_fast([case, free])
    compare(case, res, 0)  # every step and call, times equal
    compare(free, res, 1)


def test_the_cap_is_one_or_more():
    with pytest.raises(ValueError, match="admit_episode_cap=0"):
        PolicyParams(admit_episode_cap=0)
    with pytest.raises(ValueError, match="admit_episode_cap=-2"):
        PolicyParams(admit_episode_cap=-2)


def test_prime_rl_lowers_its_starting_permits():
    pol = Case([*BASE, "policy=prime_rl"], None, None).cfg.policy
    ctx = LoweringContext(group_size=8, instances=4)
    assert pol.lower(ctx).admit_episode_cap == pol.min_inflight  # no initial_inflight: the controller starts there
    assert attrs.evolve(pol, initial_inflight=64).lower(ctx).admit_episode_cap == 64
    assert not any("permits read when the dispatcher wakes" in g for g in pol.fast_path_gaps)


def test_per_instance_sync_with_a_cap_is_refused_by_name():
    from simrl_fast.lowering import FastPathUnsupported, lower

    case = _case(4)
    # the sync shape's admission (budget (version + 1) x batch), which per-instance sync needs, and a cap
    rec = attrs.evolve(case.cfg.policy.params_record, sync_per_instance=1, route_needs_dispatch_version=1,
                       admit_budget_base_groups=2.0, admit_budget_per_version_groups=2.0)
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    with pytest.raises(FastPathUnsupported, match="admit_episode_cap"):
        lower(case.cfg, case.workload, case.costs)
