"""srl-sweep's lowering: the workload lowered once, per-point and grid lowering give the same
fast-path parameters, engines and fallback reasons as one full `lower` per point."""

from pathlib import Path

import numpy as np
import pytest
import yaml
from simhelpers import SWEEP_BASE

from simrl_explore.runner import SweepError, prepare, route
from simrl_explore.space import load_space

ROOT = Path(__file__).resolve().parents[2]
BASE = SWEEP_BASE  # a small fast-path-supported sweep base (tests/simhelpers.py)


def _reference(space, jobs, workloads, cache):
    """The sweep's lowering before the workload was shared: `lower` with no `wa`, point by point."""
    from simrl_explore.surrogate import Surrogates
    from simrl_fast.lowering import FastPathUnsupported, lower

    s, out = Surrogates(), {}
    for job in jobs:
        if job.cfg is None:
            continue
        w = workloads[job.workload_key]
        costs, info = cache.costs(job.cfg), {}
        try:
            if space.surrogate == "linear":
                costs, info = s.linearise(job.cfg, w, costs, job.workload_key)
            out[job.point.index] = ("fast", lower(job.cfg, w, costs)[1], info)
        except FastPathUnsupported as exc:
            out[job.point.index] = ("simpy", str(exc), {})
    return out


def _same_params(a, b) -> bool:
    return all(np.asarray(getattr(a, f)).dtype == np.asarray(getattr(b, f)).dtype
               and np.asarray(getattr(a, f)).tobytes() == np.asarray(getattr(b, f)).tobytes() for f in a._fields)


def _check_against_reference(space, points):
    jobs, workloads, cache = prepare(space, points)
    ref = _reference(space, jobs, workloads, cache)
    assert ref, "no runnable point: the comparison would be empty"
    for lowering in ("point", "grid", "auto"):
        for j in jobs:
            j.row.pop("fallback", None)
            for k in [k for k in j.row if k.startswith("surrogate_")]:
                del j.row[k]
        fast, oracle = route(space, jobs, workloads, cache, lowering=lowering)
        got = {j.point.index: ("fast", p, wa) for items in fast.values() for j, p, wa in items}
        got.update({j.point.index: ("simpy", j.row["fallback"], None) for j in oracle})
        assert got.keys() == ref.keys(), lowering
        for i, (engine, val, info) in ref.items():
            assert got[i][0] == engine, (lowering, i)
            if engine == "fast":
                assert _same_params(got[i][1], val), (lowering, i)
                job = next(j for j in jobs if j.point.index == i)
                assert {k: v for k, v in job.row.items() if k.startswith("surrogate_")} == info
            else:
                assert got[i][1] == val, (lowering, i)
    return ref


def test_the_gpu32_example_lowers_as_point_by_point():
    pytest.importorskip("jax")
    space = load_space(str(ROOT / "examples/sweep/gpu32.yaml"))
    points = space.points()
    # two rollout splits (every TP, ZeRO, staleness and max_num_seqs draw): dropped, surrogate-fitted points
    ref = _check_against_reference(space, [p for p in points if p.variables["rollout_gpus"] in (4, 12)])
    assert sum(e == "fast" for e, _, _ in ref.values()) >= 40


def test_a_group_the_grid_refuses_falls_back_point_by_point(tmp_path):
    pytest.importorskip("jax")
    # KV capacity 120 tokens: calls of up to ~80 + prompt fit or not depending on the draw; with the
    # kv check off, `lower` refuses the too-small points and they go to SimPy with its reason, while
    # the others in the same cost group stay on the fast path.
    spec = {"name": "t", "base": {"set": BASE}, "checks": [],
            "axes": [{"name": "kv", "key": "deployment.rollout.kv_capacity_tokens", "grid": [60, 100000]},
                     {"name": "seqs", "key": "deployment.rollout.max_num_seqs", "grid": [2, 4]},
                     {"name": "stale", "key": "policy.max_staleness", "grid": [0, 1]}]}
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(spec))
    space = load_space(str(p))
    ref = _check_against_reference(space, space.points())
    engines = sorted(e for e, _, _ in ref.values())
    assert engines == ["fast"] * 4 + ["simpy"] * 4
    assert all("KV capacity" in v for e, v, _ in ref.values() if e == "simpy")
    jobs, workloads, cache = prepare(space, space.points())
    for lowering in ("point", "grid", "auto"):
        with pytest.raises(SweepError, match="point 0 .*KV capacity"):
            route(space, jobs, workloads, cache, engine="fast", lowering=lowering)
