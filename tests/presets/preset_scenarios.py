"""Shared scenarios for the preset behaviour tests: explicit workloads, linear costs.

Nothing here depends on the fitted cost models: every run uses `conftest.linear_costs`, so a
test's figures follow from the workload and the policy alone.
"""

from __future__ import annotations

import attrs
from simhelpers import linear_costs

from simrl.config import load_config
from simrl.engine.sim import build_simulation, summarise
from workloads.types import build_workload, single_turn_group

#: telemetry events that only happen while a rollout instance is working
ROLLOUT_EVENTS = ("call_admit", "call_finish", "preempt", "abort")


def uniform_workload(groups=64, n=4, prompt=200, completion=200, stragglers=(), straggler_completion=4000,
                     zero_variance=()):
    """Single-turn groups of equal length; listed groups have one very long sample."""
    out = []
    for g in range(groups):
        comps = [completion] * n
        if g in stragglers:
            comps[0] = straggler_completion
        rewards = [1.0] * n if g in zero_variance else [float(i % 2) for i in range(n)]
        out.append(single_turn_group(g, n, prompt, comps, rewards))
    return build_workload("uniform", 0, out)


def long_tail_workload(groups=64, n=4, prompt=200, seed=0):
    """Most samples short, every seventh group with one sample ten times longer."""
    out = []
    for g in range(groups):
        comps = [150 + 37 * ((g * n + i) % 5) for i in range(n)]
        if g % 7 == 3:
            comps[(g + seed) % n] = 3000
        out.append(single_turn_group(g, n, prompt, comps))
    return build_workload("long_tail", seed, out)


def run(overrides, workload, step_s=5.0, sync_s=0.5, policy=None, **cost_kw):
    """Run a scenario; ``policy`` replaces the configured policy object (e.g. a probe subclass)."""
    cfg = load_config(overrides=list(overrides))
    if policy is not None:
        cfg = attrs.evolve(cfg, policy=policy)
    sim = build_simulation(cfg, workload, linear_costs(step_s=step_s, sync_s=sync_s, **cost_kw))
    sim.run()
    report = summarise(sim)
    assert report.diagnosis is None, report.diagnosis
    return report, sim


def rollout_events_during_training(sim) -> list[dict]:
    """Rollout telemetry events strictly inside some step's [train_start, train_end]."""
    spans = [(s.train_start, s.train_end) for s in sim.steps]
    return [e for e in sim.events if e["kind"] in ROLLOUT_EVENTS and any(a < e["t"] < b for a, b in spans)]


def group_finish(report, gid: int) -> float:
    return max(c.finish for c in report.calls if c.gid == gid)
