"""SimPy vs JAX over the whole declared feature set, in vmapped batches (`widerun.run_cases` over
`widecases.wide_case`): random accepted `PolicyParams` records and presets, linear / roofline
(dense, MoE, fitted) rollouts, constant / linear / analytical training at several layouts, built-in
weight-sync models. Per step and per call; discrete outcomes and times exactly (no tolerance, docs/fastpath.md "Results and tolerances").

The generator itself is checked in CI (it must reach what it claims to draw, and every case it
draws that the fast path accepts must lower); the comparisons are `-m slow` (each batch of 100 is
about three minutes on a loaded 2-core machine). CI's differential sample of this generator is
tests/fast/test_hypothesis_differential.py::test_hypothesis_wide_feature_set_matches_simpy.
"""

import numpy as np
import pytest

pytest.importorskip("jax")

from widecases import lowered_or_reason  # noqa: E402
from widerun import draw, run_cases  # noqa: E402

from simrl.cost.roofline import RooflineRollout  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402


def test_the_generator_reaches_the_feature_set():
    """60 draws (no simulation): records and presets, every in-flight rule, roofline and analytical
    costs, MoE, variable batches, on_demand KV, colocated placement, chunked prefill, and most draws lower (a refusal
    is a named feature outside the set)."""
    cases = [draw(11, i) for i in range(60)]
    lowered = [lowered_or_reason(c) for c in cases]
    ok = [low for low in lowered if not isinstance(low, str)]
    assert len(ok) >= 50, [low for low in lowered if isinstance(low, str)]
    assert {int(p.rule) for _, p, _ in ok} == {0, 1, 2, 3, 4}  # swap_in_place runs as continue (0)
    assert any(isinstance(c.cfg.policy, ParamsPolicy) for c in cases)
    assert any(not isinstance(c.cfg.policy, ParamsPolicy) for c in cases)
    assert any(isinstance(c.costs.rollout, RooflineRollout) and c.costs.rollout.array_params().is_moe
               for c in cases)
    assert {int(p.ro_kind) for _, p, _ in ok} == {0, 1} and {int(p.tr_kind) for _, p, _ in ok} == {0, 1}
    assert any(int(p.batch_max) > int(p.batch) for _, p, _ in ok)
    assert any(int(p.batch_window) for _, p, _ in ok)
    assert any(int(p.count_since_pub) for _, p, _ in ok) and any(int(p.drop_stale) for _, p, _ in ok)
    assert any(np.isfinite(p.queue_block) for _, p, _ in ok) and any(int(p.collapse) for _, p, _ in ok)
    # on_demand KV at one to three calls' need (preemption), colocated placement by the deployment, by a
    # record and by the trl / slime presets, with a drawn offload and with the built colocated phases
    assert {int(p.od) for _, p, _ in ok} == {0, 1} and {int(p.colocated) for _, p, _ in ok} == {0, 1}
    assert any(int(p.od) and int(p.colocated) for _, p, _ in ok)
    # chunked prefill: unchunked, budgets that split prompts, budgets at or below max_num_seqs (decoding can use
    # the whole budget), with on_demand KV
    assert {int(p.token_budget) > 0 for _, p, _ in ok} == {False, True}
    assert any(0 < int(p.token_budget) <= int(p.max_seqs) for _, p, _ in ok)
    assert any(int(p.token_budget) > 0 and int(p.od) for _, p, _ in ok)
    # groups failed at a publication (fail_on_version_crossing): by a record and by dressage, with chunked prefill
    # and with the prefix cache
    assert any(int(p.cross) > 0 for _, p, _ in ok)
    # per-instance weight sync (psrl with small knobs, or a sync-shape record made per-instance)
    assert any(float(p.pull_s) > 0 for _, p, _ in ok)
    # verl V1's / TRL async's fields: oldest-dispatch-first batches, drops by dispatch age, returned slots
    assert any(int(p.batch_oldest) for _, p, _ in ok) and any(int(p.age) > 0 for _, p, _ in ok)
    assert any(int(p.return_evicted) for _, p, _ in ok)
    # the router redrawn (diffcases.draw_router): dp_shard, and an active cap
    assert any(int(p.router) == 2 for _, p, _ in ok) and any(int(p.cap) > 0 for _, p, _ in ok)
    assert any(int(p.cross) > 0 and int(p.token_budget) > 0 for _, p, _ in ok)
    assert any(int(p.cross) > 0 and int(p.pc) for _, p, _ in ok)
    col = [c for c, low in zip(cases, lowered, strict=True) if not isinstance(low, str) and int(low[1].colocated)]
    assert any(c.costs.colocated is not None and c.costs.offload_s > 0 for c in col)
    assert any(c.costs.colocated is None and c.costs.offload_s > 0 for c in col)
    assert any(isinstance(c.cfg.policy, ParamsPolicy) and c.cfg.policy.params.colocated for c in col)
    assert any(c.cfg.policy.kind in ("trl", "slime") and c.cfg.policy.mode == "sync" for c in col)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [101, 102, 103])
def test_wide_random_configurations_match_simpy(seed):
    out = run_cases([draw(seed, i) for i in range(100)], list(range(100)))
    assert not out["failures"], out["failures"][:3]
    assert out["run"] >= 80
