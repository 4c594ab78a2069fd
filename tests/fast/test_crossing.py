"""The record extension ``fail_on_version_crossing`` on the JAX fast path (simrl_fast.crossing), against
SimPy and against a run worked out by hand; and the dispatch held during a global pause (Weights._pause).
"""

import numpy as np
import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
from diffcases import BASE, Case, compare, preemptions_until_done, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from simrl.engine.sim import build_simulation, summarise  # noqa: E402
from simrl.policy.params import PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402
from simrl.policy.rules import InflightRule, code  # noqa: E402
from simrl_fast import FastPathUnsupported, lower  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

# Six prompt groups of two calls; completion lengths (tokens) per group.
LENGTHS = [(2, 2), (10, 10), (3, 3), (20, 20), (2, 2), (2, 2)]


def _hand_case(**policy) -> Case:
    wl = build_workload("hand", 0, [single_turn_group(g, 2, 100, list(c), [0.0, 1.0]) for g, c in enumerate(LENGTHS)])
    # every iteration takes a = 0.01 s (no batch, KV or prefill terms); a step 0.055 s, a publication 0.1 s
    costs = linear_costs(kv_tokens=10**6, step_s=0.055, sync_s=0.1, a=0.01, b=0.0, c=0.0, p=0.0)
    pol = ["policy=dressage", "policy.rollout_batch_size=1", "policy.async_max_active_groups=2",
           "policy.rollout_max_retries=1", *(f"policy.{k}={v}" for k, v in policy.items())]
    ov = [*BASE, *pol, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=8", "run.training_steps=3"]
    return Case(ov, wl, costs, label=" ".join(pol))


def _run_simpy(case: Case) -> list[dict]:
    """`Case.run_simpy`, keeping the telemetry events."""
    sim = build_simulation(case.cfg, case.workload, case.costs)
    sim.run()
    case.report, case.preemptions = summarise(sim), preemptions_until_done(sim)
    return sim.recorder.events


def test_groups_crossing_a_publication_fail_and_their_prompts_are_dispatched_again():
    """One instance, two groups in flight, batches of one group, one retry (k = 1). A call admitted at
    boundary b (t = b * 0.01) with L tokens finishes at boundary b + L.

    t=0     g0 (prompt 0, L=2) and g1 (prompt 1, L=10) dispatched, admitted at boundary 0.
    0.02    g0 done -> step 1 trains it (0.02 .. 0.075); g2 (prompt 2, L=3) dispatched, admitted at 3.
    0.06    g2 done (buffered); g3 (prompt 3, L=20) dispatched, admitted at 7.
    0.075   training ends: dispatch held, pause at the next boundary, 0.08; publication 0.08 .. 0.18.
    0.18    v1: g1 and g3 are running with calls admitted under v0 -> failed, retries 0 < 1: re-dispatched
            as g4 (prompt 1, retries 1) and g5 (prompt 3); step 2 takes g2 at once (0.18 .. 0.235).
    0.24    pause (the boundary after 0.235); publication 0.24 .. 0.34.
    0.34    v2: g4 and g5 crossed again, retries 1 = k -> aborted; fresh prompts 4 and 5 as g6 and g7
            (fresh index = 6 dispatched - 2 retried = 4), L=2: done at 0.36; step 3 takes g6 (0.36 .. 0.415).
    0.36    g8 (prompt 0, L=2) and g9 (prompt 1, L=10) dispatched, admitted at once; g8 done at 0.38, g10
            (prompt 2, L=3) admitted at 0.39, done at the pause boundary 0.42 (training ends at 0.415).
    0.52    published; g9 (retries 0) fails (re-dispatched as g11 in SimPy's last instant, after the
            fast path stops).
    """
    case = _hand_case()
    events = _run_simpy(case)
    rep = case.report
    assert [s.gids for s in rep.steps] == [(0,), (2,), (6,)]
    want = [(0.0, 0.02, 0.075, 0.18), (0.18, 0.18, 0.235, 0.34), (0.34, 0.36, 0.415, 0.52)]
    for s, (ws, br, te, pe) in zip(rep.steps, want, strict=True):
        assert (s.wait_start, s.batch_ready, s.train_end, s.publish_end) == pytest.approx((ws, br, te, pe), abs=1e-12)
    aborted = sorted(e["gid"] for e in events if e["kind"] == "group_abort")
    assert aborted == [1, 3, 4, 5, 9] and rep.totals["groups_retried"] == 3

    # in the same batch, a configuration that fails nothing, with more queued calls at a publication than the
    # window the failing one needs (Static.cross_window = 2 groups x 2 calls): its queues stay whole
    other = _hand_case()
    rec = PolicyParams(admit_concurrency_groups=8.0, inflight_rule=code(InflightRule.KEEP_PAUSE), fast_path_exact=1,
                       batch_min_groups=3, batch_max_groups=3)
    other.cfg = attrs.evolve(other.cfg, policy=ParamsPolicy(rec),
                             deployment=attrs.evolve(other.cfg.deployment, rollout=attrs.evolve(
                                 other.cfg.deployment.rollout, max_num_seqs=1)))
    _run_simpy(other)
    res = run_fast([case, other])
    compare(case, res, 0)  # every step and call, times equal
    compare(other, res, 1)
    assert int(res.groups_dispatched[0]) == 11  # g0..g10 (SimPy's g11, g12 come after the final publication)
    # g6 trains prompt 4's samples (2 + 2 completion tokens); calls of the failed groups never finish
    assert int(res.completion_tokens[0, 2]) == 4
    assert np.isnan(res.call_finish[0, 2:4]).all() and np.isnan(res.call_finish[0, 6:12]).all()
    assert res.call_finish[0, 12] == pytest.approx(0.36, abs=1e-12)


def test_without_retries_every_crossed_group_is_aborted():
    # k = 0: g1 and g3 are aborted at 0.18 (as above) and nothing is re-dispatched: g4 and g5 take the fresh
    # prompts 4 and 5 (L=2, done at 0.20), so step 2 still trains g2 and step 3 g4 (2 + 2 tokens)
    case = _hand_case(rollout_max_retries=0)
    events = _run_simpy(case)
    assert case.report.totals["groups_retried"] == 0
    first = [(e["gid"], e["t"]) for e in events if e["kind"] == "group_abort"][:2]
    assert [g for g, _ in first] == [1, 3] and [t for _, t in first] == pytest.approx([0.18, 0.18], abs=1e-12)
    assert [s.gids for s in case.report.steps] == [(0,), (2,), (4,)]
    res = run_fast([case])
    compare(case, res, 0)
    assert int(res.completion_tokens[0, 2]) == 4


def test_crossing_is_refused_where_rollout_runs_through_a_publication():
    hand = _hand_case()
    rec = PolicyParams(admit_concurrency_groups=2.0, inflight_rule=code(InflightRule.CONTINUE), fast_path_exact=1,
                       fail_on_version_crossing=1)
    cfg = attrs.evolve(hand.cfg, policy=ParamsPolicy(rec))
    with pytest.raises(FastPathUnsupported, match=r"fail_on_version_crossing\) under inflight_rule continue"):
        lower(cfg, hand.workload, hand.costs)
    # with chunked prefill and the prefix cache it lowers (test_a_group_failed_part_way_through_chunked_prefill...)
    cfg = Case([*hand.overrides, "deployment.rollout.max_num_batched_tokens=256",
                "deployment.rollout.prefix_caching=true"], None, None).cfg
    assert int(lower(cfg, hand.workload, hand.costs)[1].cross) == 2


def _chunked_prefix_case(extra=(), policy=None) -> Case:
    """The hand case's groups with a 100-token prompt whose first 60 tokens the group shares, a budget of 30
    prefill tokens per iteration (max_num_batched_tokens=30) and prefix caching on; KV capacity 310 tokens."""
    groups = [attrs.evolve(single_turn_group(g, 2, 100, list(c), [0.0, 1.0]), shared_prompt_tokens=60)
              for g, c in enumerate(LENGTHS)]
    wl = build_workload("hand", 0, groups)
    costs = linear_costs(kv_tokens=310, step_s=0.055, sync_s=0.1, a=0.01, b=0.0, c=0.0, p=0.0)
    case = _hand_case()
    ov = [*case.overrides, "deployment.rollout.max_num_batched_tokens=30", "deployment.rollout.prefix_caching=true",
          "deployment.rollout.kv_capacity_tokens=310", *extra]
    out = Case(ov, wl, costs, label="chunked prefix " + " ".join(extra))
    if policy is not None:
        out.cfg = attrs.evolve(out.cfg, policy=policy)
    return out


def test_a_group_failed_part_way_through_chunked_prefill_leaves_the_line_and_its_kv():
    """One instance, iterations of a = 0.01 s, a budget of 30 - n_decoding prefill tokens per iteration. A group's
    first call allocates the shared 60 tokens and prefills 100; the second hits them and prefills 40. Reserved KV:
    shared 60 once + private (prompt - 60) + completion.

    t=0     g0 (L=2) and g1 (L=10) admitted: line r0 [0,100] r1 [100,140] r2 [140,240] r3 [240,280].
            30 tokens per iteration: r0 done in it3 (first token 0.04), r1 in it4 (budget 29; first token 0.05),
            r0 finishes 0.05, r1 0.06: g0 done, trained 0.06 .. 0.115; g2 (L=3) dispatched, admitted at 0.07.
    0.07    line r4 [280,380] r5 [380,420] after r2, r3, done up to 208 (it5: 29, it6: 30 from 149):
            it7 -> 238, it8 -> 240 (r2 decodes) + 28 -> 268, it9 (budget 29) -> 280 (r3) + 17 -> 297,
            it10 (28) -> 325, it11 -> 353: at the pause (boundary 0.12, after 0.115) r4 has 73 of 100 prefilled
            and r5 none; the KV holds 2 * 60 shared + 4 * 40 private + 10 + 10 + 3 + 3 = 306 tokens.
    0.22    publication: g1 (decoding) and g2 (r4 part-way, r5 on the line) fail, re-dispatched as g3 (prompt 1)
            and g4 (prompt 2), admitted at once on an empty line with the KV back to 0: each needs
            110 + 50 + 103 + 43 = 306 <= 310 (with 306 still held they would not fit). g1's and g2's entries
            are now cached (60 each) and evicted for g4 (make_room: 310 - 160 - 120 < 103).
            r6 [0,100] r7 [100,140] r8 [140,240] r9 [240,280]: it12..15 -> 120 (r6 first token 0.26),
            it16 (29) -> 149 (r7, 0.27), it17..19 (28) -> 233, it20 (28) -> 261 (r8, 0.31), it21 (27) -> 280 (r9,
            0.32): r8 (L=3) finishes 0.33, r9 0.34 (g4 done: step 2 takes it), r6 (L=10) 0.35, r7 0.36.
            (A stale 27 + 40 token stretch left on the line would delay every one of them by two iterations.)
    """
    case = _chunked_prefix_case()
    events = _run_simpy(case)
    aborts = [(e["gid"], e["t"]) for e in events if e["kind"] == "group_abort"]
    assert [g for g, _ in aborts[:2]] == [1, 2] and [t for _, t in aborts[:2]] == pytest.approx([0.22, 0.22], abs=1e-12)
    fin = {e["rid"]: e["t"] for e in events if e["kind"] == "call_finish"}
    assert [fin[r] for r in (0, 1, 8, 9, 6, 7)] == pytest.approx([0.05, 0.06, 0.33, 0.34, 0.35, 0.36], abs=1e-12)
    assert case.report.steps[1].gids == (4,)
    # the same failure under abort_resume with a cache kept across publications (clear_cache_on_sync=0): the
    # aborted requests released their prefixes at the pause, in admission order (compared with SimPy)
    rec = PolicyParams(admit_concurrency_groups=2.0, inflight_rule=code(InflightRule.ABORT_RESUME), fast_path_exact=1,
                       fail_on_version_crossing=1, clear_cache_on_sync=0)
    kept = _chunked_prefix_case(policy=ParamsPolicy(rec))
    _run_simpy(kept)
    res = run_fast([case, kept])
    compare(case, res, 0)
    compare(kept, res, 1)
    assert res.call_finish[0, 9] == pytest.approx(0.34, abs=1e-12)


@pytest.mark.slow
def test_dressage_at_its_defaults_matches_simpy():
    """The default scenario at its full defaults (roofline rollout, analytical training, on_demand KV, chunked
    prefill of 8192 tokens, the prefix cache over group-shared prompts, 2 instances, 5 steps, 32 groups of 8 per
    step): every group in flight at an update fails (146 re-dispatched, 159 aborted in SimPy); every step and
    call equal, times included."""
    from simrl.config import load_config
    from simrl.cost.build import build_costs
    from simrl.engine.sim import load_workload

    ov = ["policy=dressage"]
    cfg = load_config(overrides=ov)
    assert cfg.deployment.rollout.max_num_batched_tokens == 8192 and cfg.deployment.rollout.prefix_caching
    wl = load_workload(cfg)
    case = Case(ov, wl, build_costs(cfg), label="dressage defaults")
    events = _run_simpy(case)
    assert case.report.totals["groups_retried"] == 146
    assert sum(e["kind"] == "group_abort" for e in events) == 159
    res = run_fast([case])
    assert compare(case, res, 0) == {"time": 0.0, "call": 0.0}
