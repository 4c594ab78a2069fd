"""Shared test helpers: small workloads, linear cost models, one-call simulation.

Imported as `simhelpers` (tests/ is on pytest's pythonpath); `tests/conftest.py` re-exports
them for older imports.
"""

from __future__ import annotations

import numpy as np

import simrl.cli  # noqa: F401  (the CLI layer loads presets when no entry points are installed)
from simrl.config import load_config
from simrl.cost.build import Costs
from simrl.cost.linear import ConstantSync, ConstantTraining, LinearRollout
from simrl.cost.vidur_import import vidur_data_dir
from simrl.engine.sim import build_simulation, summarise
from workloads.types import CallSpec, GroupSpec, TrajectorySpec, build_workload, single_turn_group


def linear_costs(kv_tokens=1_000_000, step_s=10.0, sync_s=1.0, a=0.005, b=2e-5, c=1e-8, p=5e-5) -> Costs:
    return Costs(LinearRollout(a=a, b=b, c=c, p=p, kv_tokens=kv_tokens), ConstantTraining(a=step_s),
                 ConstantSync(sync_s))


def random_workload(groups=64, n=8, seed=0, prompt=(100, 800), completion=(50, 3000), zero_variance=0.0):
    """Single-turn groups with uniform lengths; a fraction of groups has identical rewards."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        comps = [int(x) for x in rng.integers(completion[0], completion[1], n)]
        if rng.random() < zero_variance:
            rewards = [1.0] * n
        else:
            rewards = [float(i % 2) for i in range(n)]
        out.append(single_turn_group(g, n, int(rng.integers(*prompt)), comps, rewards))
    return build_workload("random", seed, out)


def multi_turn_workload(groups=16, n=4, turns=3, prompt=400, obs=100, completion=200, latency=0.5, salted=False):
    out = []
    for g in range(groups):
        trajs = []
        for t in range(n):
            calls, p = [], prompt
            for j in range(turns):
                new = prompt if j == 0 else obs
                if j:
                    p = p + completion + obs
                calls.append(CallSpec(p, new, completion, latency if j + 1 < turns else 0.0, salted))
            trajs.append(TrajectorySpec(t, tuple(calls), float(t % 2)))
        out.append(GroupSpec(g, 0 if salted else prompt, tuple(trajs)))
    return build_workload("multi", 0, out)


def run_sim(overrides=(), workload=None, costs=None):
    """Run and return (report, simulation)."""
    cfg = load_config(overrides=list(overrides))
    sim = build_simulation(cfg, workload or random_workload(), costs or linear_costs())
    sim.run()
    return summarise(sim), sim


# The real Vidur measurements shipped with the package (simrl/cost/data/vidur, MIT, NOTICE beside them).
VIDUR_DATA = vidur_data_dir()


def check_invariants(report, sim) -> None:
    """The engine's invariants on a finished run (docs/model.md), for any policy."""
    t = report.totals
    assert t["trajectories_dispatched"] == (
        t["trajectories_trained"] + t["trajectories_buffered"] + t["trajectories_dropped"]
        + t["trajectories_in_flight"]
    )
    bound = sim.policy.staleness_spec.bound
    stale = [s for step in report.steps for s in step.staleness]
    assert all(s >= 0 for s in stale)
    if bound is not None:
        if sim.policy.staleness_spec.enforced:
            assert max(stale, default=0) <= bound
        assert t["staleness_violations"] == sum(1 for s in stale if s > bound)
    # One publication per step: step k trains from version k-1 (never decreasing, no gaps).
    assert [s.train_version for s in report.steps] == list(range(len(report.steps)))
    assert all(c.version_end >= c.version_start for c in report.calls)
    assert all(c.first_token is None or c.arrival <= c.first_token <= c.finish for c in report.calls)
    assert all(s.kv_used <= sim.kv_capacity for s in sim.samples)
    for inst in sim.instances:
        assert 0 <= inst.kv_used and inst.kv_used + inst.cache_tokens <= inst.capacity


#: the `set:` of a small sweep space every point of which the fast path supports (linear costs,
#: reserved KV, no chunked prefill or prefix cache, bounded_async), shared by the srl-sweep tests
SWEEP_BASE = {"cost.rollout": "linear", "cost.training": "constant", "cost.weight_sync": "fixed",
        "cost.weight_sync_knobs.publish_s": 1, "deployment.rollout.max_num_batched_tokens": 0,
        "deployment.rollout.kv_policy": "reserve", "deployment.rollout.prefix_caching": False,
        "router.active_cap": 0, "policy": "bounded_async", "policy.batch_groups": 2,
        "policy.inflight_rule": "keep_pause", "workload.groups": 6, "workload.group_size": 2,
        "run.training_steps": 2, "workload.knobs.completion_knots": [[0, 20], [1, 80]]}
