"""The group book: admission, the life of every dispatched prompt group, and its counters.

It owns the `PipelineState` the policy sees, the run-wide `Tally`, the retry queue and the
`dispatcher` process. Instances report calls to it through `CallPort` (admitted, preempted,
discarded, finished); when a trajectory's last call finishes, the book asks the policy for a
verdict (after the engine's own staleness check, `simrl.engine.staleness`) and carries out the
`PublishActions` the policy returns. Aborting a group removes its calls from the instances and
the router through their ``remove_group``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import attrs
import simpy

from simrl.engine import staleness
from simrl.engine.errors import SimulationError
from simrl.engine.ports import Changed
from simrl.engine.recorder import Recorder
from simrl.engine.records import Request
from simrl.policy.base import (
    GroupRecord,
    InstanceLoad,
    PipelineState,
    Policy,
    PublishActions,
    SyncScope,
    TrajRecord,
    Verdict,
)
from simrl.report import CallRecord
from workloads.types import Workload

#: groups in flight at once beyond which admission is considered runaway
MAX_GROUPS_IN_FLIGHT = 200_000
#: finished groups in a row that none was accepted, in passes over the workload's prompt groups
#: (at least NO_PROGRESS_MIN), beyond which the run cannot make progress: every group is dropped
NO_PROGRESS_PASSES = 2
NO_PROGRESS_MIN = 64


@attrs.define
class Tally:
    """Run-wide counters for the report and the invariants."""

    trajectories_dispatched: int = 0
    trajectories_trained: int = 0
    trajectories_dropped: int = 0
    tokens_generated: int = 0  # tokens of finished calls, less those of groups later aborted
    tokens_wasted_abort: int = 0  # discarded by abort-and-restart or by aborting a group (all its tokens)
    tokens_wasted_filter: int = 0  # in groups the policy dropped
    tokens_reprefilled: int = 0  # recomputed after abort-resume or preemption
    preemptions: int = 0
    aborts: int = 0
    groups_retried: int = 0


class GroupBook:
    def __init__(self, env: simpy.Environment, workload: Workload, policy: Policy, recorder: Recorder,
                 changed: Changed, kv_capacity: int, n_instances: int):
        self.env = env
        self.workload = workload
        self.policy = policy
        self.staleness = policy.staleness_spec
        self.per_instance_sync = policy.sync_spec.scope is SyncScope.PER_INSTANCE
        self.rec = recorder
        self.changed = changed
        self.kv_capacity = kv_capacity
        self.st = PipelineState(n_instances=n_instances, instance_versions=[0] * n_instances,
                                policy_state=policy.init_state())
        self.tally = Tally()
        self.retry: deque[GroupRecord] = deque()
        self.next_gid = 0
        self.unaccepted_run = 0  # finished groups in a row that were not accepted (`check_progress`)
        self.next_rid = 0
        self.dispatch_paused = False  # set by the weight keeper while it drains
        self.instances: Sequence = ()
        self.router = None
        from workloads.drift import drift_of

        self.drift = drift_of(workload.knobs)  # response length drifting over steps (workloads.drift)
        self.clock = None  # the trainer's `LimitClock` (simrl.engine.limits), when one watches

    def attach(self, instances: Sequence, router) -> None:
        """Wire the instances and the router (they are built after the book)."""
        self.instances = instances
        self.router = router
        self.st.probe = self.instance_loads

    def log(self, kind: str, **fields) -> None:
        self.rec.log(self.env.now, kind, **fields)

    # -- LoadPort ----------------------------------------------------------------------------
    def sample(self, instance: int, waiting: int, running: int, kv_used: int) -> None:
        self.rec.sample(self.env.now, instance, waiting, running, kv_used, len(self.router.queue))
        if self.clock is not None:
            self.clock.sample(instance, waiting, running)

    def instance_loads(self) -> list[InstanceLoad]:
        return [instance_load(i) for i in self.instances]

    # -- admission ---------------------------------------------------------------------------
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
            if self.clock is not None:
                self.clock.settled(self.dispatch_paused)
            recheck = None if self.dispatch_paused else self.policy.recheck_in(self.st)
            if recheck is None:
                yield self.changed.wait()
            else:  # a time-based gate (e.g. an admission window) opens by itself
                yield self.changed.wait() | self.env.timeout(max(recheck, 0.0))

    def check_progress(self, verdict: Verdict) -> None:
        """Stop with a diagnosis when groups keep finishing and none is accepted: with every
        group dropped (e.g. a zero-variance filter on a workload without reward variance) the
        dispatcher would draw prompts forever and training would never start."""
        limit = max(NO_PROGRESS_PASSES * self.workload.n_groups, NO_PROGRESS_MIN)
        if self.unaccepted_run >= limit:
            raise SimulationError(
                f"no progress: the last {self.unaccepted_run} finished groups ({NO_PROGRESS_PASSES} passes over the "
                f"workload's {self.workload.n_groups} prompt groups, or at least {NO_PROGRESS_MIN}) were all "
                f"rejected (last verdict: {verdict.value}) by policy {self.policy.kind}, so no batch can form; "
                f"{self.st.steps_done} training steps done. Check the policy's filter (zero-variance / reward "
                "filters, max_retries) and the workload's rewards (workload.knobs.zero_variance_fraction)"
            )

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
        self.policy.check_group_size(len(trajs))
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
            completion_tokens=self.completion_tokens(c, g), salted=salted, arrival=self.env.now,
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

    def completion_tokens(self, c: int, g: GroupRecord) -> int:
        """Call c's forced completion length for group g: as drawn, or drifted by g's dispatch version."""
        n = int(self.workload.call_completion_tokens[c])
        if self.drift is None:
            return n
        mml = self.workload.knobs.get("max_model_len")
        return self.drift.completion(n, int(self.workload.call_prompt_tokens[c]), g.dispatch_version,
                                     int(mml) if mml else None)

    # -- CallPort ----------------------------------------------------------------------------
    def on_admit(self, instance: int, version: int, r: Request) -> None:
        r.traj.note_version(version)
        self.log("call_admit", rid=r.rid, inst=instance, version=version, prefill=r.prefill_total)

    def on_preempt(self, instance: int, r: Request) -> None:
        self.tally.preemptions += 1
        self.log("preempt", rid=r.rid, inst=instance, generated=r.generated)

    def on_discard(self, r: Request, tokens: int) -> None:
        self.tally.tokens_wasted_abort += tokens
        r.traj.wasted_tokens += tokens

    def on_finished(self, instance: int, r: Request) -> None:
        tr, g = r.traj, r.group
        if g.gid not in self.st.running:
            return  # its group was aborted by the policy in this same iteration
        self.tally.tokens_generated += r.completion_tokens
        tr.completion_tokens += r.completion_tokens
        tr.prompt_tokens = r.prompt_tokens  # the latest call's prompt, history included
        tr.calls_done += 1
        self.tally.tokens_reprefilled += r.reprefill_tokens
        self.rec.calls.append(CallRecord(
            gid=g.gid, tid=tr.tid, turn=r.turn, instance=instance, arrival=r.arrival,
            first_token=r.first_token, finish=r.finish, prompt_tokens=r.prompt_tokens,
            completion_tokens=r.completion_tokens, generated_tokens=r.completion_tokens,
            version_start=r.version_start if r.version_start is not None else r.version,
            version_end=r.version, aborts=r.aborts, preemptions=r.preemptions,
        ))
        self.log("call_finish", rid=r.rid, inst=instance, version=r.version)
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

    # -- finishing ---------------------------------------------------------------------------
    def finish_trajectory(self, g: GroupRecord, tr: TrajRecord) -> None:
        if g.gid not in self.st.running:
            return  # aborted by the policy meanwhile
        tr.finish_time = self.env.now
        if g.done:
            self.finish_group(g)

    def verdict(self, g: GroupRecord) -> Verdict:
        """The engine's staleness check first, then the policy's filter."""
        if staleness.drop_at_completion(self.staleness, g, self.st.version):
            return Verdict.DROP
        return self.policy.on_group_done(g, self.st)

    def finish_group(self, g: GroupRecord) -> None:
        g.finish_time = self.st.now = self.env.now
        del self.st.running[g.gid]
        verdict = self.verdict(g)
        self.log("group_done", gid=g.gid, verdict=verdict.value, min_version=g.min_version)
        if verdict is Verdict.ACCEPT:
            self.st.buffer.append(g)
            self.st.groups_accepted += 1
            self.unaccepted_run = 0
        else:
            self.drop_group(g)
            if verdict is Verdict.RETRY:
                self.retry.append(g)
            self.unaccepted_run += 1
            self.check_progress(verdict)
        self.apply(self.policy.after_group_done(self.st))
        self.changed.notify()
        if self.per_instance_sync:
            # A lagging idle instance asks `should_pull` again: the policy's condition may depend on
            # the buffers (PSRL seamless_train_version), as upstream's sync loop re-checks on a timer.
            for inst in self.instances:
                if inst.version < self.st.version:
                    inst.wake()

    def after_publication(self) -> None:
        """The version just advanced: evict what aged past the bound, then the policy's actions."""
        evicted = staleness.evict_at_publication(self.staleness, self.st)
        actions = self.policy.on_publish(self.st)
        if evicted:
            actions = attrs.evolve(actions, drop_buffered=evicted + actions.drop_buffered)
        self.apply(actions, evicted=frozenset(evicted))

    def apply(self, actions: PublishActions, evicted: frozenset[int] = frozenset()) -> None:
        """Carry out a policy's `PublishActions` (``evicted``: the engine's staleness evictions among them)."""
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
                by = "staleness" if g.gid in evicted else "policy"  # the engine's eviction or the policy's
                self.log("buffer_drop", gid=g.gid, by=by, min_version=g.min_version)
                self.drop_group(g)
            self.st.buffer = [g for g in self.st.buffer if g.gid not in drop]

    def drop_group(self, g: GroupRecord, aborted: bool = False) -> None:
        """Discard a group; its finished calls' tokens are filter waste, or abort waste if it was aborted."""
        self.st.groups_dropped += 1
        self.tally.trajectories_dropped += len(g.trajs)
        if aborted:  # docs/model.md: every token of an aborted group is tokens_wasted_abort
            self.tally.tokens_generated -= g.completion_tokens
            self.tally.tokens_wasted_abort += g.completion_tokens
        else:
            self.tally.tokens_wasted_filter += g.completion_tokens

    def abort_group(self, gid: int) -> None:
        """Abort an in-flight group the policy gave up on (its tokens are wasted)."""
        g = self.st.running.pop(gid)
        for inst in self.instances:
            for r in inst.remove_group(g):
                self.on_discard(r, r.generated)  # kept tokens of an aborted or preempted call
        for r in self.router.remove_group(g):
            self.on_discard(r, r.generated)
        g.finish_time = self.env.now
        self.drop_group(g, aborted=True)
        self.log("group_abort", gid=gid)

    def trained(self, batch: list[GroupRecord]) -> None:
        for g in batch:
            self.tally.trajectories_trained += len(g.trajs)


def instance_load(i) -> InstanceLoad:
    """An instance as policies may see it."""
    return InstanceLoad(i.index, i.version, len(i.running), len(i.waiting), i.kv_used, i.capacity, i.preemptions)
