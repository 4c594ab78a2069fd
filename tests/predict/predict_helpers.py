"""Helpers for the srl-predict tests: a small generator-based run and its snapshots."""

from __future__ import annotations

from simhelpers import linear_costs

from simrl.config import load_config
from simrl.engine.sim import build_simulation
from simrl.snapshot import take_snapshot

SMALL = ["workload.groups=32", "workload.group_size=4", "workload.knobs.max_completion=1024"]


def small_cfg(seed=0, steps=3, extra=()):
    return load_config(overrides=[f"run.training_steps={steps}", f"run.seed={seed}", *SMALL, *extra])


def snapshot_at(cfg, t, costs=None):
    """Run ``cfg`` up to simulated time ``t`` (the last event before it) and snapshot it."""
    sim = build_simulation(cfg, costs=costs or linear_costs())
    sim.run_before(t)
    return take_snapshot(sim), sim


def full_run(cfg, costs=None):
    sim = build_simulation(cfg, costs=costs or linear_costs())
    sim.run()
    return sim
