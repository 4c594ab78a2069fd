"""On-demand KV (vLLM recompute preemption) on the fast path, worked by hand and against SimPy.

Both scenarios run one instance with linear costs of dyadic numbers (a = 1, b = 0.5 per decoding
sequence, c = 0, p = 0.125 per prefilled token), so every boundary time below is exact in binary
and both engines must give it exactly.
"""

import pytest

pytest.importorskip("jax")

from diffcases import BASE, Case, compare, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from workloads.types import build_workload, single_turn_group  # noqa: E402

ON_DEMAND = [b.replace("kv_policy=reserve", "kv_policy=on_demand") for b in BASE]
COSTS = {"a": 1.0, "b": 0.5, "c": 0.0, "p": 0.125}


def _preemptions(case):
    return [int(i["preemptions"]) for i in case.report.instances]


@pytest.fixture(scope="module")
def cases():
    # 1. Groups of one call (one shape for both scenarios, one compile): sync trains the first two,
    #    prompt 10 each, completions 6 (rid 0) and 4 (rid 1), on one instance with max_num_seqs=2.
    one = build_workload("od-hand", 0, [single_turn_group(g, 1, 10, [x]) for g, x in enumerate((6, 4, 2, 2))])
    base = [*ON_DEMAND, "policy=sync", "policy.batch_groups=2", "run.training_steps=1",
            "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=2"]
    tight = Case([*base, "deployment.rollout.kv_capacity_tokens=24"], one,
                 linear_costs(kv_tokens=24, step_s=1.0, sync_s=0.5, **COSTS), "preempts")
    roomy = Case([*base, "deployment.rollout.kv_capacity_tokens=30"], one,
                 linear_costs(kv_tokens=30, step_s=1.0, sync_s=0.5, **COSTS), "fits")
    # 2. Groups of one call: A (prompt 10, 2 tokens), C (10, 20), D (20, 5), E (10, 2); bounded_async
    #    with one group per batch and staleness 2 admits three groups; abort_resume at each update.
    four = build_workload("od-abort", 0, [single_turn_group(0, 1, 10, [2]), single_turn_group(1, 1, 10, [20]),
                                          single_turn_group(2, 1, 20, [5]), single_turn_group(3, 1, 10, [2])])
    aborts = Case([*ON_DEMAND, "policy=bounded_async", "policy.batch_groups=1", "policy.max_staleness=2",
                   "policy.inflight_rule=abort_resume", "run.training_steps=2", "deployment.rollout.instances=1",
                   "deployment.rollout.max_num_seqs=2", "deployment.rollout.kv_capacity_tokens=33"], four,
                  linear_costs(kv_tokens=33, step_s=1.0, sync_s=0.5, **COSTS), "resume over capacity")
    out = [tight, roomy, aborts]
    for c in out:
        c.run_simpy()
    return out, run_fast(out)


def test_the_newest_request_is_preempted_and_recomputed_as_prompt(cases):
    """Capacity 24. t=0: both admitted (KV 20); iteration 1 prefills 20 tokens: 1 + 0.125*20 = 3.5 s.
    t=3.5: KV 22 (a first token each), 22 + 2 decoding <= 24; iteration 1 + 0.5*2 = 2 s.
    t=5.5: KV 24, 24 + 2 > 24: rid 1 (the newest, 2 tokens) is preempted (KV 12) and goes back to
    the head of the queue; iterations of rid 0 alone take 1.5 s: t = 7, 8.5, 10, 11.5 (rid 1 needs
    10 + 2 = 12 more: 13 + 12 > 24 at t = 7, ...). t=11.5: rid 0 finishes its 6th token; rid 1 is
    admitted and re-prefills prompt + its 2 tokens: 1 + 0.125*12 = 2.5 s -> 14 (token 3), then
    1.5 s -> 15.5 (token 4, done)."""
    (tight, roomy, _), res = cases
    finish = {c.gid: c.finish for c in tight.report.calls}
    assert finish == {0: 11.5, 1: 15.5}
    assert _preemptions(tight) == [1]
    assert res.call_finish[0, :2].tolist() == [11.5, 15.5]
    assert res.preemptions[0].tolist() == [1]
    # Capacity 30: never preempted (KV 24 + 2 <= 30 at t=5.5, rid 1 is done at 9.5, KV 26 + 1 at 7.5):
    # 3.5, 5.5, 7.5, 9.5 (rid 1's 4th token) and rid 0 alone 11, 12.5.
    finish = {c.gid: c.finish for c in roomy.report.calls}
    assert finish == {0: 12.5, 1: 9.5} and _preemptions(roomy) == [0]
    assert res.call_finish[1, :2].tolist() == [12.5, 9.5] and res.preemptions[1].tolist() == [0]
    compare(tight, res, 0, rel=0.0)
    compare(roomy, res, 1, rel=0.0)


def test_requests_resumed_over_capacity_wait_without_a_preemption(cases):
    """Capacity 33. t=0: A and C admitted (20 tokens): 3.5 s; t=3.5 -> 5.5 (2 decoding): A finishes,
    batch [A] trains 5.5 -> 6.5; D is admitted (KV 12 + 20 = 32, + 1 decoding <= 33); iteration
    1 + 0.5 + 0.125*20 = 4 s. t=9.5: the pause (abort_resume): C holds 13 tokens, D 21: 34 > 33.
    Publication 9.5 -> 10. At the resume C is re-admitted (13) and D does not fit (13 + 21 > 33):
    it waits at the head, with no preemption; C re-prefills 13 tokens: 1 + 1.625 = 2.625 s -> 12.625
    (token 4), then 16 more tokens at 1.5 s: C finishes at 36.625, batch 2 = [C]. D and E (dispatched
    at 10) are admitted then (21 + 10 <= 33): 1 + 0.125*31 = 4.875 s -> 41.5, the pause; 42 the
    publication."""
    (_, _, aborts), res = cases
    m = 2
    calls = {c.gid: c.finish for c in aborts.report.calls}
    assert calls[0] == 5.5 and calls[1] == 36.625
    steps = aborts.report.steps
    assert [s.gids for s in steps] == [(0,), (1,)]
    assert steps[1].batch_ready == 36.625 and steps[1].publish_end == 42.0
    assert _preemptions(aborts) == [0]
    assert res.call_finish[m, 1] == 36.625 and res.publish_end[m, 1] == 42.0
    assert res.preemptions[m].tolist() == [0]
    compare(aborts, res, m, rel=0.0)
