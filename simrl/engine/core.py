"""The Simulation: wiring of the SimPy processes and the bookkeeping they share.

Processes (docs/model.md): one `Instance.run` per rollout instance, `Router.run`, the
`dispatcher` (group admission through the policy), the `trainer_loop` (batches, training
steps, weight publication, in `simrl.engine.trainer`). Everything a process decides is a
small method here or in the policy; processes only wait and call.

`Simulation` is also the object `srl step` drives: `step()` runs one SimPy event.
"""

from __future__ import annotations

import math
from collections import deque

import attrs
import simpy

from simrl.config import SimConfig
from simrl.engine.instance import Instance
from simrl.engine.records import Request
from simrl.engine.router import Router
from simrl.engine.trainer import pull_weights, trainer_loop
from simrl.policy.base import GroupRecord, InstanceLoad, PipelineState, TrajRecord, Verdict
from simrl.policy.errors import PolicyError
from simrl.report import CallRecord, StepRecord
from workloads.types import Workload

#: groups in flight at once beyond which admission is considered runaway
MAX_GROUPS_IN_FLIGHT = 200_000


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for benchmarks)."""

    def __init__(self):
        super().__init__()
        self.processed = 0

    def step(self) -> None:
        self.processed += 1
        super().step()


class SimulationError(RuntimeError):
    """The scenario cannot run (a call larger than KV, a layout that does not fit, ...)."""


@attrs.define
class Tally:
    """Run-wide counters for the report and the invariants."""

    trajectories_dispatched: int = 0
    trajectories_trained: int = 0
    trajectories_dropped: int = 0
    tokens_generated: int = 0  # tokens of finished calls (abort-restart losses are counted apart)
    tokens_wasted_abort: int = 0  # discarded by abort-and-restart
    tokens_wasted_filter: int = 0  # in groups the policy dropped
    tokens_reprefilled: int = 0  # recomputed after abort-resume or preemption
    preemptions: int = 0
    aborts: int = 0
    groups_retried: int = 0


class Simulation:
    def __init__(self, cfg: SimConfig, workload: Workload, costs):
        self.cfg = cfg
        self.workload = workload
        self.costs = costs
        self.policy = cfg.policy
        self.env = CountingEnvironment()
        rcfg = cfg.deployment.rollout
        self.kv_capacity = rcfg.kv_capacity_tokens or int(costs.rollout.kv_capacity_tokens())
        if self.kv_capacity <= 0:
            raise SimulationError(f"rollout KV capacity is {self.kv_capacity} tokens; nothing can run")
        self.placement = self.policy.placement or cfg.deployment.placement
        self.policy_clears_cache = self.policy.clear_prefix_cache_on_sync
        self.st = PipelineState(n_instances=rcfg.instances, instance_versions=[0] * rcfg.instances)
        self.instances = [Instance(self, i) for i in range(rcfg.instances)]
        self.st.probe = self.instance_loads
        self.router = Router(self)
        self.tally = Tally()
        self.events: list[dict] = []  # telemetry, in order
        self.samples: list[tuple] = []  # (t, instance, waiting, running, kv_used, router queue)
        self.calls: list[CallRecord] = []
        self.steps: list[StepRecord] = []
        self.retry: deque[GroupRecord] = deque()
        self.next_gid = 0
        self.next_rid = 0
        self.changed = self.env.event()
        self.done = self.env.event()
        self.dispatch_paused = False
        self.trainer_phase = "waiting"
        self.diagnosis: str | None = None
        self.telemetry = cfg.run.telemetry
        self._started = False

    # -- wiring ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for inst in self.instances:
            self.env.process(inst.run())
        self.env.process(self.router.run())
        self.env.process(self.dispatcher())
        self.env.process(trainer_loop(self))

    def notify(self) -> None:
        """Something the dispatcher or trainer waits on may have changed."""
        if not self.changed.triggered:
            self.changed.succeed()

    def wait_change(self):
        if self.changed.triggered:
            self.changed = self.env.event()
        return self.changed

    def log(self, kind: str, **fields) -> None:
        if self.telemetry:
            self.events.append({"t": self.env.now, "kind": kind, **fields})

    def sample_instance(self, inst: Instance) -> None:
        self.samples.append(
            (self.env.now, inst.index, len(inst.waiting), len(inst.running), inst.kv_used, len(self.router.queue))
        )

    # -- admission -------------------------------------------------------------------------
    def dispatcher(self):
        """Start prompt groups whenever the policy admits one (retries first)."""
        while True:
            self.st.now = self.env.now
            while not self.dispatch_paused and self.policy.admit(self.st):
                if len(self.st.running) >= MAX_GROUPS_IN_FLIGHT:
                    raise SimulationError(
                        f"policy {self.policy.kind} admitted {MAX_GROUPS_IN_FLIGHT} groups without bound; "
                        "check its batch and staleness knobs"
                    )
                self.start_group()
            yield self.wait_change()

    def start_group(self) -> GroupRecord:
        wl = self.workload
        if self.retry:
            old = self.retry.popleft()
            wg, epoch, retries = old.wg, old.epoch, old.retries + 1
        else:
            n = self.st.groups_dispatched - self.tally.groups_retried
            wg, epoch, retries = n % wl.n_groups, n // wl.n_groups, 0
        trajs = []
        for t in wl.group_trajs(wg):
            calls = wl.traj_calls(t)
            trajs.append(TrajRecord(tid=t, reward=float(wl.traj_reward[t]), calls_total=len(calls)))
        g = GroupRecord(
            gid=self.next_gid, wg=wg, epoch=epoch, dispatch_time=self.env.now,
            dispatch_version=self.st.version, trajs=trajs, retries=retries,
        )
        self.next_gid += 1
        self.st.groups_dispatched += 1
        if retries:
            self.tally.groups_retried += 1
        self.st.running[g.gid] = g
        self.tally.trajectories_dispatched += len(trajs)
        self.policy.on_dispatch(g, self.st)
        self.log("group_dispatch", gid=g.gid, wg=wg, epoch=epoch, version=self.st.version)
        for tr in trajs:
            self.submit_call(g, tr, 0)
        return g

    def submit_call(self, g: GroupRecord, tr: TrajRecord, turn: int) -> None:
        if g.gid not in self.st.running:
            return  # the group was aborted while this call waited for its tool latency
        wl = self.workload
        c = int(wl.traj_call_start[tr.tid]) + turn
        salted = bool(wl.call_cache_salted[c])
        req = Request(
            rid=self.next_rid, group=g, traj=tr, turn=turn, call=c,
            prompt_tokens=int(wl.call_prompt_tokens[c]), new_tokens=int(wl.call_new_tokens[c]),
            shared_tokens=0 if (turn or salted) else int(wl.group_shared_prompt_tokens[g.wg]),
            completion_tokens=int(wl.call_completion_tokens[c]), salted=salted, arrival=self.env.now,
        )
        self.next_rid += 1
        need = req.prompt_tokens + req.completion_tokens
        if need > self.kv_capacity:
            raise SimulationError(
                f"call {turn} of trajectory {tr.tid} (group {g.wg}) needs {need} KV tokens "
                f"(prompt {req.prompt_tokens} + completion {req.completion_tokens}) but an instance holds "
                f"{self.kv_capacity}; raise deployment.rollout.kv_capacity_tokens, tp, or gpu_memory_utilization"
            )
        self.log("call_arrive", rid=req.rid, gid=g.gid, tid=tr.tid, turn=turn)
        self.router.submit(req)

    # -- callbacks from instances and the router -------------------------------------------
    def on_route(self, inst: Instance, req: Request) -> None:
        self.sample_instance(inst)

    def on_admit(self, inst: Instance, r: Request) -> None:
        r.traj.note_version(inst.version)
        self.log("call_admit", rid=r.rid, inst=inst.index, version=inst.version, prefill=r.prefill_total)

    def on_preempt(self, inst: Instance, r: Request) -> None:
        self.tally.preemptions += 1
        self.log("preempt", rid=r.rid, inst=inst.index, generated=r.generated)

    def on_discard(self, r: Request, tokens: int) -> None:
        self.tally.tokens_wasted_abort += tokens
        r.traj.wasted_tokens += tokens

    def on_call_finished(self, inst: Instance, r: Request) -> None:
        tr, g = r.traj, r.group
        if g.gid not in self.st.running:
            return  # its group was aborted by the policy in this same iteration
        self.tally.tokens_generated += r.completion_tokens
        tr.completion_tokens += r.completion_tokens
        tr.prompt_tokens = r.prompt_tokens  # the latest call's prompt, history included
        tr.calls_done += 1
        self.tally.tokens_reprefilled += r.reprefill_tokens
        self.calls.append(CallRecord(
            gid=g.gid, tid=tr.tid, turn=r.turn, instance=inst.index, arrival=r.arrival,
            first_token=r.first_token, finish=r.finish, prompt_tokens=r.prompt_tokens,
            completion_tokens=r.completion_tokens, generated_tokens=r.completion_tokens,
            version_start=r.version_start if r.version_start is not None else r.version,
            version_end=r.version, aborts=r.aborts, preemptions=r.preemptions,
        ))
        self.log("call_finish", rid=r.rid, inst=inst.index, version=r.version)
        self.router.wake()
        lat = float(self.workload.call_tool_latency_s[r.call])
        if tr.calls_done < tr.calls_total:
            ev = self.env.timeout(lat)
            ev.callbacks.append(lambda _ev, g=g, tr=tr, t=r.turn + 1: self.submit_call(g, tr, t))
        elif lat > 0:
            # Tool time after the last call (e.g. running the tests that score it).
            self.env.timeout(lat).callbacks.append(lambda _ev, g=g, tr=tr: self.finish_trajectory(g, tr))
        else:
            self.finish_trajectory(g, tr)

    def finish_trajectory(self, g: GroupRecord, tr: TrajRecord) -> None:
        if g.gid not in self.st.running:
            return  # aborted by the policy meanwhile
        tr.finish_time = self.env.now
        if g.done:
            self.finish_group(g)

    def finish_group(self, g: GroupRecord) -> None:
        g.finish_time = self.st.now = self.env.now
        del self.st.running[g.gid]
        verdict = self.policy.on_group_done(g, self.st)
        self.log("group_done", gid=g.gid, verdict=verdict.value, min_version=g.min_version)
        if verdict is Verdict.ACCEPT:
            self.st.buffer.append(g)
            self.st.groups_accepted += 1
        else:
            self.drop_group(g, filtered=True)
            if verdict is Verdict.RETRY:
                self.retry.append(g)
        self.apply(self.policy.after_group_done(self.st))
        self.notify()

    def apply(self, actions) -> None:
        """Carry out a policy's `PublishActions`."""
        for gid in actions.abort_running:
            if gid in self.st.running:
                self.abort_group(gid)
        for gid in actions.requeue_running:
            if gid in self.st.running:
                self.retry.append(self.st.running[gid])
                self.abort_group(gid)
        drop = set(actions.drop_buffered)
        if drop:
            for g in [g for g in self.st.buffer if g.gid in drop]:
                self.drop_group(g, filtered=True)
            self.st.buffer = [g for g in self.st.buffer if g.gid not in drop]

    def instance_loads(self) -> list[InstanceLoad]:
        return [
            InstanceLoad(i.index, i.version, len(i.running), len(i.waiting), i.kv_used, i.capacity, i.preemptions)
            for i in self.instances
        ]

    def drop_group(self, g: GroupRecord, filtered: bool) -> None:
        self.st.groups_dropped += 1
        self.tally.trajectories_dropped += len(g.trajs)
        self.tally.tokens_wasted_filter += g.completion_tokens

    def abort_group(self, gid: int) -> None:
        """Abort an in-flight group the policy gave up on (its tokens are wasted)."""
        g = self.st.running.pop(gid)
        for inst in self.instances:
            for r in [q for q in inst.running if q.group is g]:
                inst.release(r)
                self.on_discard(r, r.generated)
            for r in [q for q in inst.waiting if q.group is g and q.generated]:
                self.on_discard(r, r.generated)  # kept tokens of an aborted or preempted call
            inst.waiting = deque(q for q in inst.waiting if q.group is not g)
        for r in [q for q in self.router.queue if q.group is g and q.generated]:
            self.on_discard(r, r.generated)
        self.router.queue = deque(q for q in self.router.queue if q.group is not g)
        g.finish_time = self.env.now
        self.drop_group(g, filtered=False)
        self.log("group_abort", gid=gid)

    # -- weight versions -------------------------------------------------------------------
    def wants_pull(self, inst: Instance) -> bool:
        if self.policy.sync_scope != "per_instance" or inst.version >= self.st.version:
            return False
        i = inst
        load = InstanceLoad(i.index, i.version, len(i.running), len(i.waiting), i.kv_used, i.capacity, i.preemptions)
        return self.policy.should_pull(load, self.st)

    def pull_weights(self, inst: Instance):
        return pull_weights(self, inst)

    # -- stepping (srl step) ---------------------------------------------------------------
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
            from simrl.engine.watchdog import diagnose

            self.diagnosis = diagnose(self, horizon_reached=self.env.now >= horizon)
