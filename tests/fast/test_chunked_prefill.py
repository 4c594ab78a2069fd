"""Chunked prefill (``max_num_batched_tokens``) on the fast path, worked by hand and against SimPy.

One instance, ``max_num_seqs=3``, groups of one call, `sync` training the first three groups in one
batch; linear costs of dyadic numbers (a = 1, b = 0.5 per decoding sequence, c = 0, p = 0.125 per
prefilled token), so every boundary below is exact in binary and both engines must give it exactly.
"""

import pytest

pytest.importorskip("jax")

from diffcases import BASE, Case, compare, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from workloads.types import build_workload, single_turn_group  # noqa: E402

COSTS = {"a": 1.0, "b": 0.5, "c": 0.0, "p": 0.125}
ONE = ["policy=sync", "policy.batch_groups=3", "run.training_steps=1", "deployment.rollout.instances=1",
       "deployment.rollout.max_num_seqs=3", "deployment.rollout.kv_capacity_tokens=1000"]


def _case(budget, lengths, label, extra=(), kv=1000):
    wl = build_workload(label, 0, [single_turn_group(g, 1, pr, [c]) for g, (pr, c) in enumerate(lengths)])
    ov = [o for o in BASE if "max_num_batched_tokens" not in o]
    return Case([*ov, *ONE, f"deployment.rollout.max_num_batched_tokens={budget}",
                 f"deployment.rollout.kv_capacity_tokens={kv}", *extra], wl,
                linear_costs(kv_tokens=kv, step_s=1.0, sync_s=0.5, **COSTS), label)


# (prompt, completion) of rids 0, 1, 2, then a fourth group the batch does not need
SPLIT = [(4, 3), (6, 2), (5, 1), (3, 3)]
STARVED = [(2, 4), (2, 4), (3, 1), (3, 3)]
PREEMPTED = [(4, 6), (10, 2), (3, 1), (3, 3)]


def _aborted():
    """bounded_async, one group per batch, staleness 1, abort_resume; budget 6, max_num_seqs 2."""
    wl = build_workload("aborted", 0, [single_turn_group(0, 1, 4, [2]), single_turn_group(1, 1, 20, [3]),
                                       single_turn_group(2, 1, 3, [1]), single_turn_group(3, 1, 3, [2])])
    ov = [o for o in BASE if "max_num_batched_tokens" not in o]
    return Case([*ov, "deployment.rollout.max_num_batched_tokens=6", "policy=bounded_async", "policy.batch_groups=1",
                 "policy.max_staleness=1", "policy.inflight_rule=abort_resume", "run.training_steps=2",
                 "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=2",
                 "deployment.rollout.kv_capacity_tokens=1000"], wl,
                linear_costs(kv_tokens=1000, step_s=0.5, sync_s=0.5, **COSTS), "abort_resume mid-prefill")


@pytest.fixture(scope="module")
def cases():
    out = [_case(8, SPLIT, "split"), _case(2, STARVED, "starved"), _case(0, SPLIT, "unchunked"),
           _case(2, STARVED, "starved on_demand", ["deployment.rollout.kv_policy=on_demand"]),
           _case(6, PREEMPTED, "preempted mid-prefill", ["deployment.rollout.kv_policy=on_demand",
                                                          "deployment.rollout.max_num_seqs=2", "policy.batch_groups=2"],
                 kv=16),
           _aborted()]
    for c in out:
        c.run_simpy()
    return out, run_fast(out)


def _finish(case):
    return {c.gid: c.finish for c in case.report.calls if c.finish is not None and c.gid < 3}


def test_chunks_split_a_prompt_across_iterations(cases):
    """Budget 8, prompts 4 (A), 6 (B), 5 (C), all admitted at t=0.
    Iteration 0: nothing decodes, budget 8: A 4 (done), B 4 of 6, C none: 1 + 0.125*8 = 2 -> t=2, A's first
    token. Iteration 1: one decoding (A), budget 8 - 1 = 7: B 2 (done), C 5 (done):
    1 + 0.5*1 + 0.125*7 = 2.375 -> t=4.375: A's 2nd token, first tokens of B and C; C (1 token) finishes.
    Iteration 2: A and B decode: 1 + 0.5*2 = 2 -> t=6.375: A's 3rd and B's 2nd token, both finish.
    Unchunked (budget 0) for comparison: iteration 0 prefills all 15: 1 + 1.875 = 2.875; C finishes
    there; then A and B decode, 1 + 1 = 2 -> 4.875 (B's 2nd token: done), and A alone, 1 + 0.5 = 1.5 ->
    6.375 (its 3rd)."""
    (split, _, unchunked, *_), res = cases
    assert _finish(split) == {0: 6.375, 1: 6.375, 2: 4.375}
    assert res.call_finish[0, :3].tolist() == [6.375, 6.375, 4.375]
    assert _finish(unchunked) == {0: 6.375, 1: 4.875, 2: 2.875}
    assert res.call_finish[2, :3].tolist() == [6.375, 4.875, 2.875]
    compare(split, res, 0)
    compare(unchunked, res, 2)


def test_a_budget_spent_on_decoding_holds_the_prefill(cases):
    """Budget 2, prompts 2 (A, 4 tokens), 2 (B, 4 tokens), 3 (C, 1 token), all admitted at t=0.
    It. 0: budget 2: A 2 (done): 1 + 0.25 = 1.25 -> 1.25 (A 1/4).
    It. 1: A decodes, budget 1: B 1 of 2: 1 + 0.5 + 0.125 = 1.625 -> 2.875 (A 2/4).
    It. 2: budget 1: B 1 (done): 1.625 -> 4.5 (A 3/4, B 1/4).
    It. 3: A and B decode, budget 2 - 2 = 0: C waits, nothing prefills: 1 + 1 = 2 -> 6.5 (A 4/4: done;
    B 2/4) -- a plain continuation of the run anchored at 4.5 in SimPy (4.5 + 2).
    It. 4: B decodes, budget 1: C 1 of 3: 1.625 -> 8.125 (B 3/4). It. 5: C 1 more: 1.625 -> 9.75 (B done).
    It. 6: nothing decodes, budget 2: C's last token: 1 + 0.125 = 1.125 -> 10.875, its one token: done.
    On-demand KV with room to spare gives the same times."""
    (_, starved, _, starved_od, *_), res = cases
    assert _finish(starved) == {0: 6.5, 1: 9.75, 2: 10.875}
    assert res.call_finish[1, :3].tolist() == [6.5, 9.75, 10.875]
    assert res.call_finish[3, :3].tolist() == [6.5, 9.75, 10.875]
    compare(starved, res, 1)
    compare(starved_od, res, 3)


def test_a_request_preempted_mid_prefill_prefills_again_from_the_start(cases):
    """On-demand KV, capacity 16, budget 6, max_num_seqs 2: A (prompt 4, 6 tokens), B (prompt 10, 2 tokens)
    admitted at t=0 (KV 14). It. 0: A 4 (done), B 2 of 10: 1 + 0.125*6 = 1.75 -> 1.75 (A 1/6, KV 15).
    Plan before it. 1: 15 + 1 decoding <= 16; budget 6 - 1 = 5: B 5 (3 left): 1 + 0.5 + 0.625 = 2.125 -> 3.875
    (A 2/6, KV 16). Plan before it. 2: 16 + 1 > 16: B, the newest, is preempted part-way (7 of its 10
    prompt tokens prefilled, nothing generated): KV 6, B back at the head of the queue. A decodes alone,
    1.5 s an iteration: 5.375, 6.875, 8.375, 9.875 (A 6/6, done); B never fits before (KV 7 + 10 > 16).
    At 9.875 B is admitted again and prefills its whole prompt: 6 (1 + 0.75 = 1.75 -> 11.625), then 4
    (1 + 0.5 = 1.5 -> 13.125, its first token), then decodes: 1.5 -> 14.625, done."""
    (*_, pre, _), res = cases
    assert _finish(pre) == {0: 9.875, 1: 14.625}
    assert [int(i["preemptions"]) for i in pre.report.instances] == [1]
    assert res.call_finish[4, :2].tolist() == [9.875, 14.625]
    assert res.preemptions[4].tolist() == [1]
    compare(pre, res, 4)


def test_an_abort_re_prefills_a_part_prefilled_request_from_the_start(cases):
    """A (prompt 4, 2 tokens) and B (prompt 20, 3 tokens) admitted at t=0, budget 6.
    It. 0: A 4 (done), B 2: 1 + 0.75 = 1.75 -> 1.75. It. 1: budget 5: B 5 (7 of 20): 1 + 0.5 + 0.625 = 2.125 ->
    3.875: A's 2nd token, done: batch 1 = [A], trained 3.875 -> 4.375. It. 2: B 6 (13 of 20): 1.75 -> 5.625; the
    pause requested at 4.375 (abort_resume) is taken there, the publication 5.625 -> 6.125 (step 1's publish_end).
    B is aborted part-way: it re-prefills all 20 prompt tokens. C (prompt 3, 1 token), dispatched at version 1,
    queues behind it. From 6.125: B 6 -> 7.875, B 6 -> 9.625, B 6 -> 11.375, then B 2 (done) + C 3 (done):
    1 + 0.625 = 1.625 -> 13.0, C's one token: batch 2 = [C] at 13.0, trained -> 13.5; B decodes (1 + 0.5) to the
    pause at 14.5, published at 15.0."""
    (*_, ab), res = cases
    m = 5
    steps = ab.report.steps
    assert [s.gids for s in steps] == [(0,), (2,)]
    assert [(s.batch_ready, s.publish_end) for s in steps] == [(3.875, 6.125), (13.0, 15.0)]
    assert res.batch_ready[m, :2].tolist() == [3.875, 13.0] and res.publish_end[m, :2].tolist() == [6.125, 15.0]
    compare(ab, res, m)
