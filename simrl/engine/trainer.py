"""The trainer loop and weight publication (docs/model.md, "Trainer" and "Weight update").

`trainer_loop`: for each step, wait until the policy forms a batch, train it (step time and
peak memory from the training cost model), then publish the new version. Publication follows
the policy's `InflightRule` for requests still generating, globally or per instance.
In colocated placement the rollout instances pause for the whole step and pay an
offload/reload cost around it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simrl.policy.base import InflightRule
from simrl.report import StepRecord

if TYPE_CHECKING:
    from simrl.engine.core import Simulation
    from simrl.engine.instance import Instance


def trainer_loop(sim: Simulation):
    env, st, policy = sim.env, sim.st, sim.policy
    for step in range(1, sim.cfg.run.training_steps + 1):
        wait_start = st.now = env.now
        sim.trainer_phase = "waiting for a batch"
        while (batch := policy.form_batch(st)) is None:
            yield sim.wait_change()
            st.now = env.now
        taken = {g.gid for g in batch}
        st.buffer = [g for g in st.buffer if g.gid not in taken]
        # Taking a batch frees buffer room (queue-depth admission, batch semaphores): re-ask.
        sim.notify()
        batch_ready = env.now
        train_version = st.version
        staleness = tuple(g.staleness(train_version) for g in batch)
        seq_lens = [
            int(sim.workload.call_prompt_tokens[c] + sim.workload.call_completion_tokens[c])
            for g in batch for tr in g.trajs for c in [int(sim.workload.traj_call_start[tr.tid + 1]) - 1]
        ]
        peak = sim.costs.training.peak_memory_bytes(seq_lens)
        cap = sim.costs.training.memory_capacity_bytes()
        if peak > cap:
            from simrl.engine.core import SimulationError

            raise SimulationError(
                f"training step {step} needs {peak / 2**30:.1f} GiB per GPU but the GPU holds "
                f"{cap / 2**30:.1f} GiB; change deployment.training (tp/pp/cp, gpus, micro_batch_size, "
                "activation_checkpointing)"
            )
        st.training = True
        sim.log("batch_ready", step=step, groups=len(batch), staleness=list(staleness))
        offload_s = 0.0
        colocated = sim.placement == "colocated"
        if colocated:
            sim.trainer_phase = "pausing rollout (colocated)"
            yield from pause_all(sim, policy.inflight if policy.inflight is not InflightRule.DRAIN
                                 else InflightRule.KEEP_PAUSE)
            offload_s = float(getattr(sim.costs, "offload_s", 0.0))
            yield env.timeout(offload_s / 2)
        train_start = env.now
        sim.trainer_phase = f"training step {step}"
        sim.log("train_start", step=step)
        yield env.timeout(sim.costs.training.step_time(seq_lens))
        train_end = env.now
        sim.log("train_end", step=step)
        st.training = False
        sim.trainer_phase = f"publishing version {step}"
        if colocated:
            yield env.timeout(sim.costs.weight_sync.publish_time(len(sim.instances)) + offload_s / 2)
            set_version(sim, st.version + 1, keep_running=True)
            resume_all(sim)
        else:
            yield from publish(sim)
        st.steps_done = step
        publish_end = env.now
        sim.log("publish_end", step=step, version=st.version)
        for g in batch:
            sim.tally.trajectories_trained += len(g.trajs)
        sim.steps.append(StepRecord(
            step=step, train_version=train_version, wait_start=wait_start, batch_ready=batch_ready,
            train_start=train_start, train_end=train_end, publish_end=publish_end, groups=len(batch),
            trajectories=sum(len(g.trajs) for g in batch),
            trained_completion_tokens=sum(g.completion_tokens for g in batch),
            trained_prompt_tokens=sum(seq_lens) - sum(g.completion_tokens for g in batch),
            staleness=staleness, gids=tuple(g.gid for g in batch), prompts=tuple(g.wg for g in batch),
            peak_memory_bytes=peak, offload_s=offload_s,
        ))
        st.now = env.now
        sim.apply(policy.on_publish(st))
        sim.notify()
    sim.trainer_phase = "done"
    sim.done.succeed()


def publish(sim: Simulation):
    """Make version v+1 usable by rollout, applying the policy's in-flight rule."""
    env, st, policy = sim.env, sim.st, sim.policy
    sync_s = sim.costs.weight_sync.publish_time(len(sim.instances))
    rule = policy.inflight
    if policy.sync_scope == "per_instance":
        # Push to the parameter server; each instance pulls on its own (`pull_weights`).
        yield env.timeout(sync_s)
        st.version += 1
        for inst in sim.instances:
            inst.wake()
        return
    if rule is InflightRule.CONTINUE:
        yield env.timeout(sync_s)
        set_version(sim, st.version + 1, keep_running=False)
        sim.router.wake()
        return
    if rule is InflightRule.KEEP_PAUSE and not policy.pause_rollout_for_sync:
        # In-place swap without a pause (ART in_flight_lora): generation goes on during the
        # transfer; running requests continue on the new weights once it lands.
        yield env.timeout(sync_s)
        if sim.policy_clears_cache:
            for inst in sim.instances:
                inst.clear_cache()
        set_version(sim, st.version + 1, keep_running=True)
        sim.router.wake()
        return
    if rule is InflightRule.DRAIN:
        sim.dispatch_paused = True
        while st.running:
            yield sim.wait_change()
        yield from pause_all(sim, InflightRule.KEEP_PAUSE)
        yield env.timeout(sync_s)
        set_version(sim, st.version + 1, keep_running=True)
        resume_all(sim)
        sim.dispatch_paused = False
        return
    yield from pause_all(sim, rule)
    yield env.timeout(sync_s)
    set_version(sim, st.version + 1, keep_running=True)
    resume_all(sim)


def pause_all(sim: Simulation, rule: InflightRule):
    """Stop every instance at its next iteration boundary; abort running requests if the rule says."""
    acks = [inst.request_pause() for inst in sim.instances]
    yield sim.env.all_of(acks)
    for inst in sim.instances:
        abort_instance(sim, inst, rule, reroute=False)
        if sim.policy_clears_cache:
            inst.clear_cache()


def abort_instance(sim: Simulation, inst: Instance, rule: InflightRule, reroute: bool) -> None:
    if rule not in (InflightRule.ABORT_RESUME, InflightRule.ABORT_RESTART):
        return
    aborted = inst.abort_all(rule)
    sim.tally.aborts += len(aborted)
    for r in reversed(aborted):  # front-insert in reverse keeps their order
        sim.log("abort", rid=r.rid, inst=inst.index, kept=r.generated)
        if reroute:
            sim.router.submit(r, front=True)
        else:
            inst.waiting.appendleft(r)


def set_version(sim: Simulation, version: int, keep_running: bool) -> None:
    sim.st.version = version
    for inst in sim.instances:
        set_instance_version(sim, inst, version, keep_running)


def set_instance_version(sim: Simulation, inst: Instance, version: int, keep_running: bool) -> None:
    inst.version = version
    sim.st.instance_versions[inst.index] = version
    if keep_running:
        for r in inst.running:  # they continue on the new weights from the next token
            r.version = version
            r.traj.note_version(version)


def resume_all(sim: Simulation) -> None:
    for inst in sim.instances:
        if inst.paused or inst.resume_ev is not None:
            inst.resume()
    sim.router.wake()
    sim.notify()


def pull_weights(sim: Simulation, inst: Instance):
    """Per-instance sync (PSRL): this instance alone pauses, applies the rule, loads weights."""
    target = sim.st.version
    rule = sim.policy.inflight
    abort_instance(sim, inst, rule, reroute=True)
    if sim.policy_clears_cache:
        inst.clear_cache()
    sim.log("pull_start", inst=inst.index, version=target)
    yield sim.env.timeout(sim.costs.weight_sync.publish_time(1))
    set_instance_version(sim, inst, target, keep_running=rule is not InflightRule.CONTINUE)
    sim.log("pull_end", inst=inst.index, version=target)
    sim.router.wake()
