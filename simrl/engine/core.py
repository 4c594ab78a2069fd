"""The Simulation: wiring of the SimPy processes, and run / step.

Processes (docs/model.md): one `Instance.run` per rollout instance, `Router.run`, the
group book's `dispatcher` (admission through the policy), and `Trainer.run` (batches,
training steps, publication through the weight keeper `Weights`). The parts talk through the
narrow ports of `simrl.engine.ports`; this module only builds them, starts them, and runs the
event loop. `Simulation` is also the object `srl step` drives: `step()` runs one SimPy event.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from simrl.config import SimConfig
from simrl.engine.errors import SimulationError
from simrl.engine.groups import GroupBook, Tally
from simrl.engine.instance import Instance
from simrl.engine.ports import Changed
from simrl.engine.recorder import Recorder
from simrl.engine.router import Router, dp_shard_calls
from simrl.engine.trainer import StepTimeConfig, Trainer
from simrl.engine.watchdog import diagnose
from simrl.engine.weights import Weights
from simrl.policy.errors import PolicyError
from simrl.policy.params import LoweringContext
from simrl.policy.rules import Placement
from workloads.types import Workload

__all__ = ["CountingEnvironment", "Simulation", "SimulationError", "Tally"]


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for benchmarks)."""

    def __init__(self):
        super().__init__()
        self.processed = 0

    def step(self) -> None:
        self.processed += 1
        super().step()


class Simulation:
    def __init__(self, cfg: SimConfig, workload: Workload, costs):
        self.cfg, self.workload, self.costs, self.policy = cfg, workload, costs, cfg.policy
        self.env = env = CountingEnvironment()
        rcfg = cfg.deployment.rollout
        self.kv_capacity = rcfg.kv_capacity_tokens or int(costs.rollout.kv_capacity_tokens())
        if self.kv_capacity <= 0:
            raise SimulationError(f"rollout KV capacity is {self.kv_capacity} tokens; nothing can run")
        self.placement = self.policy.sync_spec.placement or Placement(cfg.deployment.placement)
        self.recorder = Recorder(cfg.run.telemetry)
        self.done = env.event()
        self.book = GroupBook(env, workload, self.policy, self.recorder, Changed(env), self.kv_capacity,
                              rcfg.instances)
        self.instances: list[Instance] = []  # filled below; the router and weights hold this list
        shard = 0
        if cfg.router.name == "dp_shard":  # the policy's fixed batch (its lowered record), or router.shard_calls
            sizes = np.diff(workload.group_traj_start)
            batch = 0
            if not cfg.router.shard_calls and len(sizes):
                try:
                    rec = self.policy.lower(LoweringContext(group_size=int(sizes[0]), instances=rcfg.instances))
                    batch = rec.batch_max_groups if rec.batch_min_groups == rec.batch_max_groups else 0
                except PolicyError:  # no record: dp_shard_calls asks for router.shard_calls
                    batch = 0
            try:
                shard = dp_shard_calls(cfg.router, batch, sizes, rcfg.instances)
            except ValueError as exc:
                raise SimulationError(str(exc)) from None
        self.router = Router(env, cfg.router, self.instances, self.policy.eligible, self.policy.route_priority,
                             shard_calls=shard)
        self.weights = Weights(env, self.book, self.instances, self.router, self.policy, costs.weight_sync)
        self.instances += [
            Instance(env, i, rcfg, costs.rollout, self.kv_capacity, calls=self.book, load=self.book,
                     pull=self.weights)
            for i in range(rcfg.instances)
        ]
        self.book.attach(self.instances, self.router)
        self.trainer = Trainer(env, self.book, self.weights, self.recorder, costs, workload,
                               cfg.run.training_steps, self.placement is Placement.COLOCATED, self.done,
                               StepTimeConfig.of(cfg.deployment.training))
        self.diagnosis: str | None = None
        self._started = False

    # -- what the CLIs, the report and the tests read ------------------------------------------
    st = property(lambda self: self.book.st)
    tally = property(lambda self: self.book.tally)
    events = property(lambda self: self.recorder.events)
    samples = property(lambda self: self.recorder.samples)
    calls = property(lambda self: self.recorder.calls)
    steps = property(lambda self: self.recorder.steps)
    trainer_phase = property(lambda self: self.trainer.phase)
    dispatch_paused = property(lambda self: self.book.dispatch_paused)

    # -- wiring ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for inst in self.instances:
            self.env.process(inst.run())
        self.env.process(self.router.run())
        self.env.process(self.book.dispatcher())
        self.env.process(self.trainer.run())

    # -- stepping (srl step) and running -----------------------------------------------------
    def step(self) -> bool:
        """Run one SimPy event; False when nothing is scheduled or the run is over."""
        self.start()
        if self.done.triggered or self.env.peek() == math.inf:
            return False
        try:
            self.env.step()
        except PolicyError as exc:
            raise SimulationError(str(exc)) from exc
        return True

    def run_before(self, t: float) -> None:
        """Run every event scheduled before simulated time ``t`` (a snapshot instant), or to the end."""
        self.start()
        while self.env.peek() < t:
            if not self.step():
                return

    def run(self) -> None:
        self.start()
        horizon = self.cfg.run.time_horizon_s
        stop = self.done if math.isinf(horizon) else self.env.any_of([self.done, self.env.timeout(horizon)])
        try:
            self.env.run(until=stop)
        except PolicyError as exc:
            raise SimulationError(str(exc)) from exc
        except RuntimeError as exc:
            if "No scheduled events left" not in str(exc):
                raise
        if not self.done.triggered:
            self.diagnosis = diagnose(self.cfg, self.env.now, self.book, self.router, self.instances,
                                      self.trainer.phase, horizon_reached=self.env.now >= horizon)
