"""The dispatcher before the trainer in the instant the first batch forms (`simrl_fast.step.disp_first`).

Both SimPy processes wait on `GroupBook.changed`; the dispatcher, started first, is registered first until the
trainer has finished a step (then the trainer goes first). So in the instant the first batch forms, the dispatcher
admits what the state before the batch allows (its groups routed, an idle instance woken), the trainer takes the
batch and notifies, and the dispatcher's second pass runs before the woken instance but is routed after it: its
calls wait for that instance's next boundary. Where admission reads the buffer or the batches taken, the fast path
used to take the batch first and admit both waves in one pass (found by tests/fast/outsider.py, seed 106: ART with
``queue_maxsize=8`` on a constant workload, 32 calls finishing 0.0093 s late).

Hand-worked: 4 groups of 2 calls (prompt 8, completion 2), one instance, iterations of a = 1 s (b = c = p = 0), so a
call admitted at t finishes at t + 2. Batches of 1 group; training 10 s, publication 1 s.

- t = 0: concurrency 2: g0 and g1 are admitted in one iteration; their 4 calls finish at 2.0.
- t = 2: both groups complete (buffered 2, running 0). The dispatcher first: with buffered groups past Q = 1 holding a
  slot (``admit_queue_blocks_groups``), running + max(0, 2 - 1) = 1 < 2 admits g2, then 1 + 1 = 2 stops. The trainer
  takes g0 (batch_ready 2.0) and notifies; the router routes g2's calls, which wakes the instance; the dispatcher
  again: 1 + max(0, 1 - 1) = 1 < 2 admits g3. The instance admits g2's two calls at 2.0 (finish 4.0); g3's calls are
  routed after it started that iteration and are admitted at its boundary 3.0 (finish 5.0).
- The same with a budget per batch taken instead (``admit_budget_per_batch_groups``, verl one_step_off, OpenRLHF,
  slime train_async): budget 3 + 1 x batches taken, counting dispatched groups, concurrency 2: g2 at 2.0 (count 2 <
  3), g3 after the batch is taken (count 3 < 4).
- Training 2.0 .. 12.0, publication 12.0 .. 13.0; every call above finishes before it.
"""

import attrs
import numpy as np
import pytest

pytest.importorskip("jax")

from diffcases import BASE, Case, compare, run_fast  # noqa: E402
from simhelpers import linear_costs  # noqa: E402

from simrl.policy.params import PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

RECORDS = {
    "queue_blocks": PolicyParams(admit_concurrency_groups=2.0, admit_queue_blocks_groups=1.0, batch_min_groups=1,
                                 batch_max_groups=1, fast_path_exact=1),
    "per_batch": PolicyParams(admit_concurrency_groups=2.0, admit_budget_base_groups=3.0,
                              admit_budget_per_batch_groups=1.0, admit_count_dispatched=1, batch_min_groups=1,
                              batch_max_groups=1, fast_path_exact=1),
}


def _case(rec, label):
    wl = build_workload("hand", 0, [single_turn_group(g, 2, 8, [2, 2]) for g in range(4)])
    costs = linear_costs(kv_tokens=10**6, step_s=10.0, sync_s=1.0, a=1.0, b=0.0, c=0.0, p=0.0)
    case = Case([*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=64",
                 "run.training_steps=1"], wl, costs, label=label)
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


@pytest.mark.slow  # (CI time: a compile of its own; test_router_pass_before_the_dispatcher covers the hold in CI)
def test_second_wave_waits_for_the_woken_instance():
    cases = [_case(rec, name) for name, rec in RECORDS.items()]
    for case in cases:
        rep = case.run_simpy()
        (s,) = rep.steps
        assert (s.batch_ready, s.train_end, s.publish_end, s.gids) == (2.0, 12.0, 13.0, (0,))
        fin = {(c.gid, c.tid % 2): c.finish for c in rep.calls}
        assert [fin[(g, k)] for g in range(4) for k in range(2)] == [2.0] * 4 + [4.0, 4.0, 5.0, 5.0], case.label
    res = run_fast(cases)
    for m, case in enumerate(cases):
        np.testing.assert_array_equal(res.call_finish[m, :8], [2.0] * 4 + [4.0, 4.0, 5.0, 5.0])
        compare(case, res, m)


def test_router_pass_before_the_dispatcher():
    """A finished call wakes the router before its group's completion notifies GroupBook.changed (`on_finished`),
    so the router routes the calls an active_cap held before the dispatcher admits, and the instance it wakes
    admits them before the dispatcher's calls are routed (`step.route_held`; before, the kernel routed both and the
    woken instance admitted both).

    Hand-worked: 6 groups of 2 calls as above, concurrency 2, batches of 1, router.active_cap=3, one instance.
    t = 0: g0, g1 dispatched; a0, a1, b0 routed (the cap: 3), b1 waits in the router queue; the three finish at 2.0.
    t = 2: the router routes b1 (0 assigned < 3) and wakes the idle instance; the dispatcher admits g2 (1 running <
    2), the trainer takes g0; the instance admits b1 (finish 4.0), then g2's calls are routed to the busy instance
    and admitted at its boundary 3.0 (finish 5.0). (The same with 2 steps: the later instants follow SimPy too.)"""
    rec = PolicyParams(admit_concurrency_groups=2.0, batch_min_groups=1, batch_max_groups=1, fast_path_exact=1)
    wl = build_workload("hand", 0, [single_turn_group(g, 2, 8, [2, 2]) for g in range(6)])
    costs = linear_costs(kv_tokens=10**6, step_s=10.0, sync_s=1.0, a=1.0, b=0.0, c=0.0, p=0.0)
    cases = []
    for steps in (1, 2):
        case = Case([*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=64",
                     f"run.training_steps={steps}", "router.active_cap=3"], wl, costs, label=f"cap steps={steps}")
        case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
        rep = case.run_simpy()
        fin = {(c.gid, c.tid % 2): c.finish for c in rep.calls}
        assert [fin[(g, k)] for g in range(3) for k in range(2)] == [2.0, 2.0, 2.0, 4.0, 5.0, 5.0]
        cases.append(case)
    res = run_fast(cases)
    for m, case in enumerate(cases):
        np.testing.assert_array_equal(res.call_finish[m, :6], [2.0, 2.0, 2.0, 4.0, 5.0, 5.0])
        compare(case, res, m)
