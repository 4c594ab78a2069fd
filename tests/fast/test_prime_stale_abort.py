"""The record extension ``abort_stale_on_publish`` (prime-rl's ``max_off_policy_steps`` check of in-flight
groups at every publication, `WeightWatcher` / ``on_version_pending``) on the JAX fast path
(`simrl_fast.crossing.fail_crossed`), against SimPy and against a run worked out by hand.
"""

import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
from diffcases import BASE, Case, compare, preemptions_until_done, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from simrl.engine.sim import build_simulation, summarise  # noqa: E402
from simrl.policy.params import LoweringContext, PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402
from simrl.policy.rules import Enforcement, InflightRule, code  # noqa: E402
from simrl_fast import FastPathUnsupported, lower  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

# Six prompt groups of two calls; completion lengths (tokens) per group.
LENGTHS = [(2, 2), (40, 40), (3, 3), (30, 30), (2, 2), (2, 2)]


def _record(bound: int = 1, rule: InflightRule = InflightRule.KEEP_PAUSE, **kw) -> PolicyParams:
    """prime_rl's staleness fields (`PrimeRLPolicy.lower`): dropped at completion, evicted and aborted at publications."""
    return PolicyParams(admit_concurrency_groups=2.0, inflight_rule=code(rule), fast_path_exact=1,
                        batch_min_groups=1, batch_max_groups=1, staleness_bound=bound,
                        staleness_enforcement=code(Enforcement.DROP_AT_COMPLETION), evict_stale_on_publish=1,
                        abort_stale_on_publish=1, **kw)


def _hand_case(rec: PolicyParams, extra=()) -> Case:
    wl = build_workload("hand", 0, [single_turn_group(g, 2, 100, list(c), [0.0, 1.0]) for g, c in enumerate(LENGTHS)])
    # every iteration takes a = 0.01 s (no batch, KV or prefill terms); a step 0.055 s, a publication 0.1 s
    costs = linear_costs(kv_tokens=10**6, step_s=0.055, sync_s=0.1, a=0.01, b=0.0, c=0.0, p=0.0)
    ov = [*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=8", "run.training_steps=3", *extra]
    case = Case(ov, wl, costs, label="stale abort")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


def _run_simpy(case: Case) -> list[dict]:
    sim = build_simulation(case.cfg, case.workload, case.costs)
    sim.run()
    case.report, case.preemptions = summarise(sim), preemptions_until_done(sim)
    return sim.recorder.events


# name -> (record, extra overrides); every case runs in one vmapped fast batch (one compile)
CASES = {
    "bound1": (dict(bound=1), ()),
    "bound2": (dict(bound=2), ()),
    "crossed": (dict(bound=1, fail_on_version_crossing=1), ()),
    "crossed_tight": (dict(bound=0, fail_on_version_crossing=1), ()),
    "queued": (dict(bound=0), ("deployment.rollout.max_num_seqs=2",)),
}


@pytest.fixture(scope="module")
def runs():
    """{name: (case with its SimPy report, SimPy's events, index in the fast results)}, fast results."""
    out = {}
    for m, (name, (rec, extra)) in enumerate(CASES.items()):
        case = _hand_case(_record(**rec), extra)
        out[name] = (case, _run_simpy(case), m)
    res = run_fast([c for c, _, _ in out.values()])
    return out, res


def _aborts(events):
    return [(e["gid"], e["t"]) for e in events if e["kind"] == "group_abort"]


def test_running_groups_past_the_bound_are_aborted_at_the_publication(runs):
    """One instance, two groups in flight, batches of one group, bound 1, keep_pause. A call admitted at boundary
    b (t = b * 0.01) with L tokens finishes at boundary b + L.

    t=0     g0 (prompt 0, L=2) and g1 (prompt 1, L=40) dispatched under v0, admitted at boundary 0 (min_version 0).
    0.02    g0 done -> step 1 trains it (0.02 .. 0.075); g2 (prompt 2, L=3) dispatched, admitted at 0.03.
    0.06    g2 done (buffered); g3 (prompt 3, L=30) dispatched, admitted at 0.07.
    0.075   training ends: dispatch held, pause at the next boundary, 0.08; publication 0.08 .. 0.18.
    0.18    v1: g1 and g3 have staleness 1 - 0 = 1, not past the bound: they run on; step 2 takes g2 at once
            (staleness 1 - 0 = 1, kept): 0.18 .. 0.235.
    0.24    pause (the boundary after 0.235; g1 has 8 + 6 = 14 of 40 tokens, g3 1 + 6 = 7 of 30); publication
            0.24 .. 0.34.
    0.34    v2: g1 and g3 have staleness 2 - 0 = 2 > 1 -> aborted and dropped (no retry); g4 and g5 take the fresh
            prompts 4 and 5 (L=2), admitted at once, done at 0.36; step 3 takes g4 (0.36 .. 0.415).
    0.42    pause; published at 0.52.
    """
    got, res = runs
    case, events, m = got["bound1"]
    rep = case.report
    assert [s.gids for s in rep.steps] == [(0,), (2,), (4,)]
    want = [(0.0, 0.02, 0.075, 0.18), (0.18, 0.18, 0.235, 0.34), (0.34, 0.36, 0.415, 0.52)]
    for s, (ws, br, te, pe) in zip(rep.steps, want, strict=True):
        assert (s.wait_start, s.batch_ready, s.train_end, s.publish_end) == pytest.approx((ws, br, te, pe), abs=1e-12)
    aborts = _aborts(events)
    assert [g for g, _ in aborts] == [1, 3] and [t for _, t in aborts] == pytest.approx([0.34, 0.34], abs=1e-12)
    assert rep.totals["groups_retried"] == 0
    # (1 + 2) x 14 + 7 x 2 = 42 generated tokens of the aborted groups are wasted
    assert rep.totals["tokens_wasted_abort"] == 2 * 14 + 2 * 7

    # bound 2: at 0.34 g1 and g3 are 2 - 0 = 2 stale, not past it, and run on; step 3 waits for g3 (L=30):
    # admitted at 0.07, 1 + 6 tokens by the pause at 0.24, on from 0.34: 23 more, done at 0.57 (g1, 26 left, at
    # 0.60, 2 stale: kept); the groups dispatched after it (under v2) are at most 1 stale at v3: nothing aborted
    loose, loose_events, m2 = got["bound2"]
    assert not _aborts(loose_events) and loose.report.steps[2].batch_ready == pytest.approx(0.57, abs=1e-12)
    compare(case, res, m)  # every step and call, times equal
    compare(loose, res, m2)
    assert int(res.completion_tokens[m, 2]) == 4  # g4: prompt 4's 2 + 2 tokens


def test_crossed_and_stale_groups_together(runs):
    """fail_on_version_crossing = 1 with the bound 1: at 0.18 (v1) g1 and g3 are crossed (a call admitted under v0,
    unfinished), not stale (1 - 0 = 1): re-dispatched as g4 (prompt 1, retries 1, L=40) and g5 (prompt 3, L=30),
    dispatched under v1 and admitted at once (min_version 1). At 0.34 (v2) they are crossed with no retry left
    and stale 2 - 1 = 1, not past the bound: aborted by the crossing rule; the new groups take prompts 4 and 5.
    With bound 0 instead, g1 and g3 are stale at 0.18 (1 - 0 > 0) and aborted there, never re-dispatched."""
    got, res = runs
    case, events, m = got["crossed"]
    aborts = _aborts(events)[:4]
    assert [g for g, _ in aborts] == [1, 3, 4, 5]
    assert [t for _, t in aborts] == pytest.approx([0.18, 0.18, 0.34, 0.34], abs=1e-12)
    tight, events, m2 = got["crossed_tight"]
    first = _aborts(events)[:2]
    assert [g for g, _ in first] == [1, 3] and [t for _, t in first] == pytest.approx([0.18, 0.18], abs=1e-12)
    assert tight.report.totals["groups_retried"] == 0
    compare(case, res, m)
    compare(tight, res, m2)


def test_a_group_still_queued_is_aged_from_its_dispatch_version(runs):
    """max_num_seqs=2 (one group at a time), concurrency 2, bound 0, keep_pause: the group waiting in the queue
    has no admitted call, so its staleness counts from its dispatch version (`GroupRecord.min_version`).

    t=0     g0 (L=2) admitted at 0; g1 (prompt 1, L=40) dispatched under v0, queued.
    0.02    g0 done -> step 1 (0.02 .. 0.075); g1 admitted at 0.02 (the boundary that freed the slots); g2
            (prompt 2) dispatched, queued.
    0.075   pause at 0.08, published 0.18 (v1): g1 (admitted under v0) and g2 (dispatched under v0, never
            admitted) are both 1 > 0 stale: aborted; g3, g4 (prompts 3, 4) dispatched under v1.
    """
    got, res = runs
    case, events, m = got["queued"]
    first = _aborts(events)[:2]
    assert [g for g, _ in first] == [1, 2] and [t for _, t in first] == pytest.approx([0.18, 0.18], abs=1e-12)
    compare(case, res, m)


def test_refused_where_rollout_runs_through_a_publication_and_without_a_bound():
    hand = _hand_case(_record(rule=InflightRule.CONTINUE))
    with pytest.raises(FastPathUnsupported, match=r"abort_stale_on_publish\) under inflight_rule continue"):
        lower(hand.cfg, hand.workload, hand.costs)
    with pytest.raises(ValueError, match="needs a staleness_bound"):
        PolicyParams(abort_stale_on_publish=1)
    with pytest.raises(ValueError, match="admit_count_since_publish"):
        PolicyParams(staleness_bound=1, abort_stale_on_publish=1, admit_count_dispatched=1, admit_count_since_publish=1)


def test_prime_rl_lowers_max_off_policy_steps():
    case = Case([*BASE, "policy=prime_rl", "policy.max_off_policy_steps=3"], None, None)
    rec = case.cfg.policy.lower(LoweringContext(group_size=8, instances=4))
    assert (rec.staleness_bound, rec.abort_stale_on_publish, rec.evict_stale_on_publish) == (3, 1, 1)
    assert rec.staleness_enforcement == code(Enforcement.DROP_AT_COMPLETION)
    assert not any("max_off_policy_steps" in g for g in case.cfg.policy.fast_path_gaps)
