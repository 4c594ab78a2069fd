"""`lower_grid`: the base configuration lowered once, swept values written into stacked Params.

Every row must equal what `lower(load_config(base + point))` gives (numpy only, no jax)."""

import numpy as np
import pytest
from simhelpers import linear_costs, random_workload

from simrl.config import load_config
from simrl_fast import FastPathUnsupported, Params, lower
from simrl_fast.grid import lower_grid

BASE = ["deployment.rollout.max_num_batched_tokens=0", "deployment.rollout.prefix_caching=false",
        "deployment.rollout.kv_policy=reserve", "policy=bounded_async", "policy.batch_groups=2"]


def test_grid_rows_equal_lowering_each_point():
    wl = random_workload(groups=6, n=2, seed=3, completion=(5, 60))
    costs = linear_costs(kv_tokens=50_000)
    cols = {"deployment.rollout.max_num_seqs": [4, 64, 4, 8], "router.name": ["round_robin", "least_requests"] * 2,
            "run.training_steps": [2, 3, 3, 2], "deployment.rollout.kv_capacity_tokens": [5000, 5000, 9000, 7000],
            "policy.max_staleness": [0, 1, 1, 2], "deployment.rollout.instances": [1, 2, 3, 2],
            "policy.inflight_rule": ["continue", "drain", "keep_pause", "continue"]}
    static, params, wa = lower_grid(wl, costs, cols, base=BASE)
    for m in range(4):
        cfg = load_config(overrides=[*BASE, *(f"{k}={v[m]}" for k, v in cols.items())])
        _, want, _ = lower(cfg, wl, costs)
        for f in Params._fields:
            got = getattr(params, f)[m]
            assert np.array_equal(got, getattr(want, f)) and got.dtype == np.asarray(getattr(want, f)).dtype, (m, f)
    assert static.slots == 64 and static.instances == 3 and static.steps == 3
    # a combination is lowered once: 4 distinct (staleness, instances, rule) -> 4 rows, same values
    assert params.n_inst.tolist() == [1, 2, 3, 2]


def test_grid_cost_columns_replace_the_shared_coefficients():
    wl = random_workload(groups=6, n=2, seed=3, completion=(5, 60))
    a, sync = np.array([0.004, 0.006]), np.array([0.5, 2.0])
    _, params, _ = lower_grid(wl, linear_costs(), {"cost.rollout.a": a, "cost.weight_sync.publish_s": sync},
                              base=BASE)
    for m in range(2):
        _, want, _ = lower(load_config(overrides=BASE), wl, linear_costs(a=float(a[m]), sync_s=float(sync[m])))
        assert all(np.array_equal(getattr(params, f)[m], getattr(want, f)) for f in Params._fields)


def test_grid_rejects_by_name():
    wl = random_workload(groups=6, n=2, seed=3, completion=(5, 60))
    with pytest.raises(FastPathUnsupported, match="grid router.name=throughput_balance: .*router.name"):
        lower_grid(wl, linear_costs(), {"router.name": ["least_requests", "throughput_balance"]}, base=BASE)
    need = int((wl.call_prompt_tokens + wl.call_completion_tokens).max())
    with pytest.raises(FastPathUnsupported, match="larger than the KV capacity"):
        lower_grid(wl, linear_costs(), {"deployment.rollout.kv_capacity_tokens": [need, need - 1]}, base=BASE)
    with pytest.raises(FastPathUnsupported, match="a \\+ b = 0 \\(grid point 1\\)"):
        lower_grid(wl, linear_costs(b=0.0), {"cost.rollout.a": [0.1, 0.0]}, base=BASE)
    with pytest.raises(ValueError, match="expected a finite number"):
        lower_grid(wl, linear_costs(), {"cost.rollout.c": [0.1, -1.0]}, base=BASE)


def test_grid_from_built_configurations_equals_loading_them():
    """``configs=`` (srl-sweep passes the configurations it built): no reload, the same rows."""
    wl = random_workload(groups=6, n=2, seed=3, completion=(5, 60))
    costs = linear_costs(kv_tokens=50_000)
    cols = {"deployment.rollout.max_num_seqs": [4, 64, 4, 8], "policy.max_staleness": [0, 1, 1, 0],
            "deployment.rollout.instances": [1, 2, 2, 1]}
    cfgs = [load_config(overrides=[*BASE, *(f"{k}={v[m]}" for k, v in cols.items())]) for m in range(4)]
    _, want, _ = lower_grid(wl, costs, cols, base=BASE)
    _, got, _ = lower_grid(wl, costs, cols, base=["policy=sync"], configs=cfgs)  # base unused with configs
    for f in Params._fields:
        assert np.asarray(getattr(got, f)).tobytes() == np.asarray(getattr(want, f)).tobytes(), f
    with pytest.raises(ValueError, match="3 configurations for 4 grid points"):
        lower_grid(wl, costs, cols, configs=cfgs[:3])


def test_colocated_grid_rows_equal_lowering_each_point():
    # the offload after training depends on the instances (built in code: offload_s / 2 + publish)
    import attrs

    wl = random_workload(groups=6, n=2, seed=3, completion=(5, 60))
    costs = attrs.evolve(linear_costs(kv_tokens=50_000), offload_s=2.0)
    base = [*BASE, "deployment.placement=colocated"]
    cols = {"deployment.rollout.instances": [1, 3, 2], "policy.inflight_rule": ["drain", "abort_restart", "continue"],
            "deployment.rollout.max_num_seqs": [4, 8, 4]}
    _, params, _ = lower_grid(wl, costs, cols, base=base)
    for m in range(3):
        _, want, _ = lower(load_config(overrides=[*base, *(f"{k}={v[m]}" for k, v in cols.items())]), wl, costs)
        assert all(np.array_equal(getattr(params, f)[m], getattr(want, f)) for f in Params._fields), m
    assert params.colocated.tolist() == [1, 1, 1] and params.off_after.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(FastPathUnsupported, match="publish_s with colocated placement"):
        lower_grid(wl, costs, {"cost.weight_sync.publish_s": [0.5, 1.0]}, base=base)
