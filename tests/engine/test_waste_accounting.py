"""Waste accounting as docs/model.md states it ("Weight update (publication)" and the verdicts of
"Rollout and groups"): a `drop` verdict's completion tokens are filter waste; a finished group
evicted from the buffer by the policy's `drop_buffered` is filter waste and a `buffer_drop`
telemetry event (``by=policy``); every token of a group aborted by `abort_running` is abort waste,
never filter waste; the report's generated tokens are trained + filter + abort waste when
nothing is left buffered or in flight.
"""

import attrs
from simhelpers import linear_costs, run_sim

from simrl.policy.base import Policy, PublishActions, Verdict
from simrl.policy.registry import register
from workloads.types import build_workload, single_turn_group


@register
@attrs.frozen
class _WastePolicy(Policy):
    """Test-only: four groups; g1 is dropped at completion, g2 evicted from the buffer when it
    arrives there, g3 aborted at that moment, g0 trained once nothing is running."""

    kind = "_test_waste"

    def admit(self, st):
        return st.groups_dispatched < 4

    def on_group_done(self, group, st):
        return Verdict.DROP if group.gid == 1 else Verdict.ACCEPT

    def after_group_done(self, st):
        if any(g.gid == 2 for g in st.buffer):
            return PublishActions(drop_buffered=(2,), abort_running=tuple(gid for gid in st.running if gid == 3))
        return PublishActions()

    def form_batch(self, st):
        if st.n_running:
            return None
        batch = [g for g in st.buffer if g.gid == 0]
        return batch or None


def test_drop_evict_and_abort_are_counted_as_docs_model_md_says():
    # One instance, prefill unchunked: the 8 calls (4 groups x 2 samples, prompt 100) prefill in
    # the first iteration, which yields each call's first token, then decode one token per
    # iteration. Completions: g0 2 x 10, g1 2 x 20, g2 2 x 30, g3 2 x 1000.
    #   iteration 10: g0 done, accepted (trained later: 20 tokens)
    #   iteration 20: g1 done, dropped by its verdict: filter waste 2 x 20 = 40
    #   iteration 30: g2 done and accepted, then evicted (drop_buffered): filter waste 2 x 30 = 60;
    #                 g3 aborted with 30 tokens generated per call: abort waste 2 x 30 = 60
    # Then nothing runs, g0 is trained (20 tokens). Generated = 20 + 40 + 60 + 60 = 180.
    wl = build_workload("waste", 0, [single_turn_group(g, 2, 100, [c, c], [0.0, 1.0])
                                     for g, c in enumerate((10, 20, 30, 1000))])
    report, sim = run_sim(["policy=_test_waste", "run.training_steps=1", "deployment.rollout.instances=1",
                           "deployment.rollout.max_num_batched_tokens=0"], wl, linear_costs(step_s=1.0))
    t = report.totals
    assert report.diagnosis is None and t["training_steps"] == 1
    assert t["tokens_trained"] == 20
    assert t["tokens_wasted_filter"] == 40 + 60
    assert t["tokens_wasted_abort"] == 60
    assert t["tokens_generated"] == 180 == t["tokens_trained"] + t["tokens_wasted_filter"] + t["tokens_wasted_abort"]
    assert t["trajectories_dropped"] == 6 and t["trajectories_trained"] == 2
    kinds = [(e["kind"], e.get("gid")) for e in sim.events
             if e["kind"] in ("group_done", "buffer_drop", "group_abort")]
    assert kinds[:3] == [("group_done", 0), ("group_done", 1), ("group_done", 2)]
    assert sorted(kinds[3:]) == [("buffer_drop", 2), ("group_abort", 3)]  # both at g2's completion
    t2 = {e["t"] for e in sim.events if e.get("gid") in (2, 3) and e["kind"] in ("buffer_drop", "group_abort")}
    assert t2 == {next(e["t"] for e in sim.events if e["kind"] == "group_done" and e["gid"] == 2)}
    assert next(e for e in sim.events if e["kind"] == "group_done" and e["gid"] == 1)["verdict"] == "drop"
    assert next(e for e in sim.events if e["kind"] == "buffer_drop")["by"] == "policy"
