"""The weight keeper: publication, per-instance pulls, pauses and resumes (docs/model.md,
"Weight update").

It enforces the policy's declared `Sync`: with ``scope = global`` a publication follows the
in-flight rule's row of `PUBLISH` (prepare, transfer, apply); with ``per_instance`` the new
version is pushed to a parameter server and each instance pulls it alone (`pull`), when the
policy's ``should_pull`` lets it. Every version change of the run happens here.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

import simpy

from simrl.engine.groups import GroupBook, instance_load
from simrl.engine.instance import Instance
from simrl.engine.router import Router
from simrl.policy.base import Policy
from simrl.policy.rules import InflightRule, Sync, SyncScope


class Weights:
    def __init__(self, env: simpy.Environment, book: GroupBook, instances: Sequence[Instance], router: Router,
                 policy: Policy, sync_cost):
        self.env = env
        self.book = book
        self.st = book.st
        self.instances = instances
        self.router = router
        self.policy = policy
        self.sync: Sync = policy.sync_spec
        self.cost = sync_cost

    def publish_s(self, instances: int) -> float:
        return self.cost.publish_time(instances)

    # -- global publication ------------------------------------------------------------------
    def publish(self) -> Generator:
        """Make version v+1 usable by rollout (once the policy is ready), applying the declared sync."""
        self.st.now = self.env.now
        while not self.policy.ready_to_publish(self.st):
            yield self.book.changed.wait()
            self.st.now = self.env.now
        if self.sync.scope is SyncScope.PER_INSTANCE:
            yield from self._push()
        else:
            yield from PUBLISH[self.sync.rule](self)

    def _push(self):
        # Push to the parameter server; each instance pulls on its own (`pull`).
        yield self.env.timeout(self.publish_s(len(self.instances)))
        self.st.version += 1
        for inst in self.instances:
            inst.wake()

    def _continue(self):
        # Versioned weights: running requests keep the version they started on.
        yield self.env.timeout(self.publish_s(len(self.instances)))
        self.set_version(self.st.version + 1, keep_running=False)
        self.router.wake()

    def _swap_in_place(self):
        # No pause (ART in_flight_lora): generation goes on during the transfer; running
        # requests continue on the new weights once it lands.
        yield self.env.timeout(self.publish_s(len(self.instances)))
        self._clear_caches()
        self.set_version(self.st.version + 1, keep_running=True)
        self.router.wake()

    def _drain(self):
        self.book.dispatch_paused = True
        while self.st.running:
            yield self.book.changed.wait()
        yield from self._pause_transfer_resume(InflightRule.KEEP_PAUSE)
        self.book.dispatch_paused = False

    def _pause(self):
        # Upstream holds new rollouts while the weights change (AReaL rollout.pause(), ROLL
        # pause_sampling, verl/SkyRL pause_generation): a group admitted meanwhile is dispatched
        # at the resume, stamped v+1, the version its first token uses.
        self.book.dispatch_paused = True
        yield from self._pause_transfer_resume(self.sync.rule, release_dispatch=True)

    def _pause_transfer_resume(self, rule: InflightRule, release_dispatch: bool = False):
        yield from self.pause_all(rule)
        yield self.env.timeout(self.publish_s(len(self.instances)))
        self.set_version(self.st.version + 1, keep_running=True)
        if release_dispatch:
            self.book.dispatch_paused = False
        self.resume_all()

    # -- colocated placement: rollout pauses for the whole training step ----------------------
    def colocated_rule(self) -> InflightRule:
        """What the pause before a colocated training step does to running requests."""
        return InflightRule.KEEP_PAUSE if self.sync.rule is InflightRule.DRAIN else self.sync.rule

    def colocated_publish(self, after_s: float):
        """After a colocated step: ``after_s`` (trainer state out, wake, reshard, KV rebuild), then resume."""
        yield self.env.timeout(after_s)
        self.set_version(self.st.version + 1, keep_running=True)
        self.resume_all()

    # -- pauses ------------------------------------------------------------------------------
    def pause_all(self, rule: InflightRule):
        """Stop every instance at its next iteration boundary; abort running requests if the rule says."""
        acks = [inst.request_pause() for inst in self.instances]
        yield self.env.all_of(acks)
        for inst in self.instances:
            self.abort_instance(inst, rule, reroute=False)
            if self.sync.clear_prefix_cache:
                inst.clear_cache()

    def resume_all(self) -> None:
        for inst in self.instances:
            if inst.paused or inst.resume_ev is not None:
                inst.resume()
        self.router.wake()
        self.book.changed.notify()

    def abort_instance(self, inst: Instance, rule: InflightRule, reroute: bool) -> None:
        if rule not in (InflightRule.ABORT_RESUME, InflightRule.ABORT_RESTART):
            return
        aborted = inst.abort_all(rule)
        self.book.tally.aborts += len(aborted)
        for r in reversed(aborted):  # front-insert in reverse keeps their order
            self.book.log("abort", rid=r.rid, inst=inst.index, kept=r.generated)
            if reroute:
                self.router.submit(r, front=True)
            else:
                inst.waiting.appendleft(r)

    def _clear_caches(self) -> None:
        if self.sync.clear_prefix_cache:
            for inst in self.instances:
                inst.clear_cache()

    # -- versions ----------------------------------------------------------------------------
    def set_version(self, version: int, keep_running: bool) -> None:
        self.st.version = version
        for inst in self.instances:
            self.set_instance_version(inst, version, keep_running)

    def set_instance_version(self, inst: Instance, version: int, keep_running: bool) -> None:
        inst.version = version
        self.st.instance_versions[inst.index] = version
        if keep_running:
            for r in inst.running:  # they continue on the new weights from the next token
                r.version = version
                r.traj.note_version(version)

    # -- PullPort: per-instance sync ---------------------------------------------------------
    def wants_pull(self, inst: Instance) -> bool:
        if self.sync.scope is not SyncScope.PER_INSTANCE or inst.version >= self.st.version:
            return False
        return self.policy.should_pull(instance_load(inst), self.st)

    def pull(self, inst: Instance):
        """Per-instance sync (PSRL): this instance alone pauses, applies the rule, loads weights."""
        target = self.st.version
        rule = self.sync.rule
        self.abort_instance(inst, rule, reroute=True)
        if self.sync.clear_prefix_cache:
            inst.clear_cache()
        self.book.log("pull_start", inst=inst.index, version=target)
        yield self.env.timeout(self.publish_s(1))
        self.set_instance_version(inst, target, keep_running=rule is not InflightRule.CONTINUE)
        self.book.log("pull_end", inst=inst.index, version=target)
        self.router.wake()


#: a global publication, one small process per in-flight rule
PUBLISH: dict[InflightRule, Callable[[Weights], Generator]] = {
    InflightRule.CONTINUE: Weights._continue,
    InflightRule.SWAP_IN_PLACE: Weights._swap_in_place,
    InflightRule.DRAIN: Weights._drain,
    InflightRule.KEEP_PAUSE: Weights._pause,
    InflightRule.ABORT_RESUME: Weights._pause,
    InflightRule.ABORT_RESTART: Weights._pause,
}
