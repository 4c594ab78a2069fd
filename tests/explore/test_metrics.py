"""Objectives, binding limit, Pareto front, feasibility checks and the linear surrogate."""

import attrs
import numpy as np
import pytest

from simrl.config import ConfigError, load_config
from simrl.cost.build import build_costs
from simrl.engine.sim import load_workload
from simrl_explore.checks import LayoutCache, check_heads, run_checks
from simrl_explore.metrics import step_metrics
from simrl_explore.surrogate import linear_rollout, linearise, nonneg_fit
from simrl_explore.sweep import pareto_mask


def test_step_metrics_by_hand():
    # Steps 2..3 (the first holds the cold start): step times 20-10=10 and 31-20=11, mean 10.5.
    # wait (14-10)+(29-20)=13, train (19-14)+(30-29)=6, sync (20-19)+(31-30)=2: the trainer starves.
    m = step_metrics([0, 10, 20], [8, 14, 29], [9, 19, 30], [10, 20, 31], [0, 1, 1, 2], [100, 200, 300], 3, gpus=4)
    assert m["step_time_s"] == pytest.approx(10.5)
    assert m["binding"] == "rollout" and m["wait_frac"] == pytest.approx(13 / 21)
    assert m["train_frac"] == pytest.approx(6 / 21) and m["sync_frac"] == pytest.approx(2 / 21)
    assert m["trained_tokens_per_s"] == pytest.approx((200 + 300) / (31 - 10))
    assert m["gpu_hours_per_1k_steps"] == pytest.approx(4 * 10.5 * 1000 / 3600)
    assert m["staleness_mean"] == 1.0 and m["staleness_max"] == 2 and m["complete"]
    # Training-bound: batches are ready when the trainer frees (wait 0), training 8 of every 9 s.
    t = step_metrics([0, 9, 18], [5, 9, 18], [8, 17, 26], [9, 18, 27], [], [1, 1, 1], 4, gpus=2)
    assert t["binding"] == "training" and t["wait_frac"] == 0 and not t["complete"]


def test_pareto_mask():
    # (minimise both) (1,5) (2,2) (5,1) are non-dominated; (3,3) is dominated by (2,2); a duplicate of
    # (2,2) does not dominate it (no strict improvement).
    v = np.array([[1, 5], [2, 2], [3, 3], [5, 1], [2, 2]], dtype=float)
    assert pareto_mask(v).tolist() == [True, True, False, True, True]


def test_nonneg_fit_recovers_a_plane_and_drops_negative_terms():
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(50), rng.uniform(1, 100, 50), rng.uniform(1, 1e4, 50)])
    y = x @ np.array([0.01, 2e-4, 3e-7])
    fit = nonneg_fit(x, y)
    assert fit.coef == pytest.approx((0.01, 2e-4, 3e-7), rel=1e-9) and fit.max_rel_err < 1e-9
    y2 = 0.02 - 1e-5 * x[:, 1]  # a decreasing time: the slope is dropped, not made negative
    assert nonneg_fit(x[:, :2], y2).coef[1] == 0.0


def test_linearised_roofline_is_exact_on_decode_and_keeps_kv_capacity():
    cfg = load_config(None, ["cost.rollout=roofline", "cost.training=fixed", "cost.training_knobs.step_s=3",
                             "workload.groups=8", "deployment.rollout.max_num_seqs=128"])
    w = load_workload(cfg)
    costs = build_costs(cfg)
    lin, info = linear_rollout(cfg, w, costs.rollout)
    # Up to 128 sequences Qwen3-8B's GEMMs are bandwidth-bound on an H100: decode is a plane.
    assert info["surrogate_rollout_med_err"] < 1e-6
    assert lin.kv_tokens == costs.rollout.kv_capacity_tokens()
    assert lin.iteration_time(64, 64 * 800, 0) == pytest.approx(costs.rollout.iteration_time(64, 64 * 800, 0), rel=1e-6)
    fast, info2 = linearise(cfg, w, costs)
    assert fast.training is costs.training and "surrogate_training_med_err" not in info2  # fixed: kept


def test_checks_name_the_reason():
    cache = LayoutCache()
    with pytest.raises(ConfigError, match="tp=3 does not divide the 32 attention heads"):
        load_config(None, ["deployment.rollout.tp=3"])  # the config layer refuses it before any check
    cfg = attrs.evolve(load_config(), deployment=attrs.evolve(
        load_config().deployment, rollout=attrs.evolve(load_config().deployment.rollout, tp=3)))
    assert check_heads(cfg).startswith("heads: deployment.rollout.tp: tp=3 does not divide the 32 attention heads")
    ok = load_config(None, ["deployment.rollout.tp=16"])  # 8 KV heads replicated twice: vLLM accepts
    assert check_heads(ok) is None
    w = load_workload(load_config(None, ["workload.groups=4"]))
    small = load_config(None, ["deployment.training.gpus=2"])
    assert run_checks(small, w, ("memory",), cache).startswith("memory: ")
    kv = load_config(None, ["deployment.rollout.kv_capacity_tokens=100"])
    assert run_checks(kv, w, ("kv",), cache).startswith("kv: capacity 100 tokens per instance < the longest call")
    assert run_checks(load_config(), w, ("heads", "memory", "kv"), cache) is None


def test_pareto_mask_equals_the_pairwise_definition():
    """Against the O(n^2) definition on random rows with many ties and duplicates."""
    rng = np.random.default_rng(1)
    for d in (1, 2, 3):
        v = rng.integers(0, 6, size=(300, d)).astype(float)
        want = [not any(np.all(v[j] <= v[i]) and np.any(v[j] < v[i]) for j in range(len(v))) for i in range(len(v))]
        assert pareto_mask(v).tolist() == want
    assert pareto_mask(np.empty((0, 2))).tolist() == []
