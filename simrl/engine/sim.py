"""`simulate(config) -> Report`: build the workload and cost models, run the engine, summarise.

This is the one entry point the CLIs, the harness's sim runtime and the tests call. It does
no file I/O beyond reading the workload trace or cost artifacts named in the config.
"""

from __future__ import annotations

import hashlib

import numpy as np

from simrl.config import SimConfig, to_yaml
from simrl.engine import staleness
from simrl.engine.core import Simulation, SimulationError
from simrl.report import REPORT_SCHEMA, Report
from workloads.types import Workload

__all__ = ["SimulationError", "build_simulation", "load_workload", "run_name", "simulate"]


def load_workload(cfg: SimConfig) -> Workload:
    w = cfg.workload
    seed = cfg.run.seed if w.seed is None else w.seed
    if w.trace:
        from workloads.trace import read_trace

        try:
            return read_trace(w.trace)
        except (OSError, ValueError) as exc:
            raise SimulationError(f"workload.trace: {exc}") from None
    import workloads

    try:
        return workloads.generate(w.generator, groups=w.groups, seed=seed, group_size=w.group_size, **w.knobs)
    except (ValueError, TypeError) as exc:
        raise SimulationError(f"workload: {exc}") from None


def run_name(cfg: SimConfig) -> str:
    if cfg.run.name:
        return cfg.run.name
    from simrl.cost.architectures import model_slug

    digest = hashlib.sha256(to_yaml(cfg).encode()).hexdigest()[:8]
    # one path component: a repo id "google/gemma-2-9b" becomes "google--gemma-2-9b"
    return f"{cfg.policy.kind}-{model_slug(cfg.deployment.model)}-{digest}"


def build_simulation(cfg: SimConfig, workload: Workload | None = None, costs=None) -> Simulation:
    if workload is None:
        workload = load_workload(cfg)
    if costs is None:
        from simrl.cost.build import build_costs

        costs = build_costs(cfg)
    return Simulation(cfg, workload, costs)


def simulate(cfg: SimConfig, workload: Workload | None = None, costs=None) -> Report:
    sim = build_simulation(cfg, workload, costs)
    sim.run()
    return summarise(sim)


def summarise(sim: Simulation) -> Report:
    """Turn a finished (or stopped) simulation into its `Report`."""
    st, t = sim.st, sim.tally
    steps = tuple(sim.steps)
    end = steps[-1].step_end if steps else sim.env.now
    makespan = max(end, 1e-12)
    stale = [s for step in steps for s in step.staleness]
    hist: dict[str, int] = {}
    for s in stale:
        hist[str(s)] = hist.get(str(s), 0) + 1
    in_flight = sum(len(g.trajs) for g in st.running.values())
    buffered = sum(len(g.trajs) for g in st.buffer)
    trained_tokens = sum(s.trained_completion_tokens for s in steps)
    latencies = np.array([c.finish - c.arrival for c in sim.calls if c.finish is not None], dtype=float)
    train_busy = sum(s.train_end - s.train_start for s in steps)
    wait = sum(s.batch_ready - s.wait_start for s in steps)
    totals = {
        "makespan_s": end,
        "training_steps": len(steps),
        "trajectories_dispatched": t.trajectories_dispatched,
        "trajectories_trained": t.trajectories_trained,
        "trajectories_buffered": buffered,
        "trajectories_dropped": t.trajectories_dropped,
        "trajectories_in_flight": in_flight,
        "groups_dispatched": st.groups_dispatched,
        "groups_retried": t.groups_retried,
        "tokens_generated": t.tokens_generated + t.tokens_wasted_abort,
        "tokens_trained": trained_tokens,
        "tokens_wasted_abort": t.tokens_wasted_abort,
        "tokens_wasted_filter": t.tokens_wasted_filter,
        "tokens_reprefilled": t.tokens_reprefilled,
        "preemptions": t.preemptions,
        "aborts": t.aborts,
        "trained_tokens_per_s": trained_tokens / makespan,
        "generated_tokens_per_s": (t.tokens_generated + t.tokens_wasted_abort) / makespan,
        "staleness_mean": float(np.mean(stale)) if stale else 0.0,
        "staleness_max": max(stale) if stale else 0,
        "staleness_histogram": hist,
        "staleness_bound": sim.policy.staleness_spec.bound,
        "staleness_violations": staleness.violations(sim.policy.staleness_spec, stale),
        "step_time_mean_s": float(np.mean([s.step_time for s in steps])) if steps else 0.0,
        "trainer_busy_fraction": train_busy / makespan,
        "trainer_wait_fraction": wait / makespan,
        "rollout_busy_fraction": float(np.mean([i.busy_s for i in sim.instances])) / makespan,
        "call_latency_p50_s": float(np.percentile(latencies, 50)) if len(latencies) else 0.0,
        "call_latency_p99_s": float(np.percentile(latencies, 99)) if len(latencies) else 0.0,
        "kv_capacity_tokens": sim.kv_capacity,
        "router_queue_at_end": len(sim.router.queue),
        **limit_totals(steps),
    }
    instances = tuple(
        {
            "index": i.index,
            "busy_s": i.busy_s,
            "busy_fraction": i.busy_s / makespan,
            "iterations": i.it,
            "preemptions": i.preemptions,
            "version": i.version,
            "kv_capacity_tokens": i.capacity,
        }
        for i in sim.instances
    )
    domain = tuple(sim.costs.domain_reports())
    provenance = tuple(sim.costs.provenance())
    return Report(
        schema=REPORT_SCHEMA,
        run_name=run_name(sim.cfg),
        policy=sim.policy.kind,
        seed=sim.cfg.run.seed,
        workload=sim.workload.summary(),
        steps=steps,
        calls=tuple(sim.calls),
        totals=totals,
        instances=instances,
        domain_warnings=domain,
        diagnosis=sim.diagnosis,
        cost_provenance=provenance,
        queue_depth=tuple(sim.trainer.clock.depth),
        colocated_phases=dict(sim.costs.colocated_phases) if sim.trainer.colocated else {},
    )


def limit_totals(steps) -> dict:
    """Binding limits, the trainer's wait by cause and the training phases, over all steps."""
    from simrl.engine.limits import LIMITS, WAIT_PARTS

    bound = dict.fromkeys(LIMITS, 0)
    for s in steps:
        if s.binding_limit:
            bound[s.binding_limit] += 1
    phases: dict[str, float] = {}
    for s in steps:
        for k, v in s.phases_s.items():
            phases[k] = phases.get(k, 0.0) + v
    return {
        "binding_limit_steps": bound,
        "trainer_wait_s": sum(s.batch_ready - s.wait_start for s in steps),
        "trainer_wait_by_cause_s": {k: sum(s.wait_s.get(k, 0.0) for s in steps) for k in WAIT_PARTS},
        "training_phases_s": phases,
        "reward_s": sum(s.reward_s for s in steps),
        "validation_s": sum(s.validation_s for s in steps),
    }
