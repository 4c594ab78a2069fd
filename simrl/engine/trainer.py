"""The trainer process (docs/model.md, "Trainer and batches").

For each step: wait until the policy forms a batch, train it (step time and peak memory from
the training cost model), then publish the new version through the weight keeper. In
colocated placement the rollout instances pause for the whole step and pay an offload/reload
cost around it. The process only waits; the sums and checks are the pure helpers below.
"""

from __future__ import annotations

import attrs
import simpy

from simrl.engine.errors import SimulationError
from simrl.engine.groups import GroupBook
from simrl.engine.limits import WAIT_PARTS, LimitClock, binding_limit
from simrl.engine.recorder import Recorder
from simrl.engine.weights import Weights
from simrl.policy.base import GroupRecord
from simrl.policy.rules import InflightRule
from simrl.report import StepRecord
from workloads.types import Workload


def batch_seq_lens(workload: Workload, batch: list[GroupRecord], book: GroupBook | None = None) -> list[int]:
    """Trained sequence length of every trajectory: its last call's prompt plus completion
    (the completion as the book forced it, drift included)."""
    w = workload
    if book is None or book.drift is None:
        return [
            int(w.call_prompt_tokens[c] + w.call_completion_tokens[c])
            for g in batch for tr in g.trajs for c in [int(w.traj_call_start[tr.tid + 1]) - 1]
        ]
    return [
        int(w.call_prompt_tokens[c]) + book.completion_tokens(c, g)
        for g in batch for tr in g.trajs for c in [int(w.traj_call_start[tr.tid + 1]) - 1]
    ]


@attrs.frozen
class StepTimeConfig:
    """Time in a step besides training (docs/model.md, "Reward and validation time"), from
    ``deployment.training``."""

    reward_s_per_trajectory: float = 0.0
    reward_workers: int = 1
    test_freq: int = 0
    validation_s: float = 0.0
    trigger_parameter_sync_step: int = 1  # >1: streaming trainer, k mini-batch updates per publication

    @classmethod
    def of(cls, training) -> StepTimeConfig:
        return cls(training.reward_s_per_trajectory, training.reward_workers, training.test_freq,
                   training.validation_s, training.trigger_parameter_sync_step)

    def reward_s(self, trajectories: int) -> float:
        """Scoring the batch: ceil(trajectories / workers) rounds of the per-trajectory time."""
        if not self.reward_s_per_trajectory:
            return 0.0
        return -(-trajectories // self.reward_workers) * self.reward_s_per_trajectory

    def validates(self, step: int, last: int) -> bool:
        """verl's rule: after step k when k % test_freq == 0, and after the last step."""
        return self.test_freq > 0 and self.validation_s > 0 and (step % self.test_freq == 0 or step == last)


def stream_groups(policy, k: int, colocated: bool, group_size: int = 1, instances: int = 1) -> int:
    """Groups per mini-batch of the streaming trainer (0: off): the policy's batch over k.

    The batch size is the policy's fixed one (``batch_min_groups == batch_max_groups`` of its
    numeric record, `Policy.lower`), e.g. verl fully_async's sync window ``ppo_mini_batch_size x
    require_batches x trigger_parameter_sync_step``, so a local step is ``require_batches x
    ppo_mini_batch_size`` groups as in verl's FullyAsyncTrainer."""
    if k <= 1:
        return 0
    if not getattr(policy, "streams", True):
        raise SimulationError(
            f"deployment.training.trigger_parameter_sync_step={k} (streaming trainer): policy {policy.kind} "
            f"(mode {getattr(policy, 'mode', '?')}) forms whole batches itself and cannot be trained in pieces")
    params = getattr(policy, "params", None)
    if params is None or not hasattr(params, "batch_max_groups"):
        from simrl.policy.params import LoweringContext

        params = policy.lower(LoweringContext(group_size=group_size, instances=instances))
    if params.batch_min_groups != params.batch_max_groups:
        raise SimulationError(
            f"deployment.training.trigger_parameter_sync_step={k} (streaming trainer) needs a policy with a fixed "
            f"batch size (PolicyParams batch_min_groups == batch_max_groups); policy {policy.kind} has none")
    if colocated:
        raise SimulationError(f"deployment.training.trigger_parameter_sync_step={k} (streaming trainer) needs "
                              "disaggregated placement (colocated rollout pauses for each whole step)")
    b = int(params.batch_max_groups)
    if b % k:
        raise SimulationError(f"deployment.training.trigger_parameter_sync_step={k} must divide the policy's "
                              f"batch of {b} groups")
    return b // k


def step_phases(training, seq_lens: list[int]) -> dict[str, float]:
    """The training cost model's phase breakdown of one step ({} when it has none).

    `phases` checks the validity domain as `step_time` does; the counts are restored so that a
    step is counted once in the report's domain warnings.
    """
    phases = getattr(training, "phases", None)
    if phases is None:
        return {}
    domain = getattr(training, "domain", None)
    saved = (dict(domain.counts), dict(domain.worst)) if domain is not None else None
    try:
        return {k: float(v) for k, v in phases(seq_lens).items()}
    finally:
        if saved is not None:
            domain.counts, domain.worst = saved


def check_memory(step: int, peak: float, cap: float) -> None:
    if peak > cap:
        raise SimulationError(
            f"training step {step} needs {peak / 2**30:.1f} GiB per GPU but the GPU holds "
            f"{cap / 2**30:.1f} GiB; change deployment.training (tp/pp/cp, gpus, micro_batch_size, "
            "activation_checkpointing)"
        )


class Trainer:
    def __init__(self, env: simpy.Environment, book: GroupBook, weights: Weights, recorder: Recorder,
                 costs, workload: Workload, steps: int, colocated: bool, done: simpy.Event,
                 step_time_cfg: StepTimeConfig | None = None):
        self.env = env
        self.book = book
        self.weights = weights
        self.rec = recorder
        self.costs = costs
        self.workload = workload
        self.steps = steps
        self.colocated = colocated
        self.done = done
        self.extra = step_time_cfg or StepTimeConfig()
        self.stream_groups = stream_groups(book.policy, self.extra.trigger_parameter_sync_step, colocated,
                                           workload.group_size(0) if workload.n_groups else 1,
                                           len(book.st.instance_versions))
        # A policy that trains each step in chunks of its own (PSRL fine_grain_overlap, pre_step)
        self.chunks = tuple(book.policy.train_chunks())
        if self.chunks and (self.stream_groups or colocated):
            raise SimulationError(f"policy {book.policy.kind} trains in chunks of its own; it needs disaggregated "
                                  "placement and deployment.training.trigger_parameter_sync_step=1")
        self.phase = "waiting"  # what the trainer is doing, for `srl step` and the diagnosis
        self.clock = LimitClock(env, book.st, book.policy, len(book.st.instance_versions))
        book.clock = self.clock

    def run(self):
        env, book, st, policy = self.env, self.book, self.book.st, self.book.policy
        for step in range(1, self.steps + 1):
            wait_start = st.now = env.now
            self.phase = "waiting for a batch"
            clock = self.clock
            if self.stream_groups or self.chunks:
                out = yield from self.stream(step)
                batch, wait_parts, batch_ready, train_start, train_end, seq_lens, peak, phases, reward_s, \
                    train_s, staleness, train_version = out
                offload_s = 0.0
                yield from self.finish_step(step, batch, wait_parts, seq_lens, peak, offload_s, phases, reward_s,
                                            (wait_start, batch_ready, train_start, train_end), staleness,
                                            train_version, train_s,
                                            len(self.chunks) or self.extra.trigger_parameter_sync_step)
                continue
            clock.trainer(waiting=True)
            spent0 = clock.snapshot()
            while (batch := policy.form_batch(st)) is None:
                yield book.changed.wait()
                st.now = env.now
            taken = {g.gid for g in batch}
            st.buffer = [g for g in st.buffer if g.gid not in taken]
            spent1 = clock.snapshot()
            wait_parts = {k: spent1[k] - spent0[k] for k in WAIT_PARTS}
            clock.trainer(waiting=False, training_groups=len(batch))
            # Taking a batch frees buffer room (queue-depth admission, batch semaphores): re-ask.
            book.changed.notify()
            batch_ready = env.now
            train_version = st.version
            staleness = tuple(g.staleness(train_version) for g in batch)
            seq_lens = batch_seq_lens(self.workload, batch, book)
            peak = self.costs.training.peak_memory_bytes(seq_lens)
            check_memory(step, peak, self.costs.training.memory_capacity_bytes())
            st.training = True
            book.log("batch_ready", step=step, groups=len(batch), staleness=list(staleness))
            offload_s = 0.0
            if self.colocated:
                self.phase = "pausing rollout (colocated)"
                yield from self.weights.pause_all(self.weights.colocated_rule())
                offload_s = float(self.costs.offload_s)
                yield env.timeout(self.costs.offload_before_s())
            reward_s = self.extra.reward_s(sum(len(g.trajs) for g in batch))
            if reward_s:
                self.phase = f"scoring the batch of step {step}"
                book.log("reward_start", step=step)
                yield env.timeout(reward_s)
            train_start = env.now
            self.phase = f"training step {step}"
            book.log("train_start", step=step)
            yield env.timeout(self.costs.training.step_time(seq_lens))
            phases = step_phases(self.costs.training, seq_lens)
            train_end = env.now
            book.log("train_end", step=step)
            st.training = False
            yield from self.finish_step(step, batch, wait_parts, seq_lens, peak, offload_s, phases, reward_s,
                                        (wait_start, batch_ready, train_start, train_end), staleness, train_version,
                                        train_end - batch_ready, 1)
        self.phase = "done"
        self.done.succeed()

    def finish_step(self, step, batch, wait_parts, seq_lens, peak, offload_s, phases, reward_s, times, staleness,
                    train_version, train_s, mini_batches):
        """Publish version `step`, validate if due, record the step, let the policy act."""
        env, book, st, clock = self.env, self.book, self.book.st, self.clock
        wait_start, batch_ready, train_start, train_end = times
        self.phase = f"publishing version {step}"
        if self.colocated:
            yield from self.weights.colocated_publish(self.costs.offload_after_s(len(self.weights.instances)))
        else:
            yield from self.weights.publish()
        st.steps_done = step
        publish_end = env.now
        book.log("publish_end", step=step, version=st.version)
        validation_s = 0.0
        if self.extra.validates(step, self.steps):
            # Validation on the new weights (verl's _validate after the update): it uses the
            # rollout engines, so every instance pauses (keeping its requests) meanwhile.
            self.phase = f"validating version {step}"
            yield from self.weights.pause_all(InflightRule.KEEP_PAUSE)
            book.log("validation_start", step=step)
            yield env.timeout(self.extra.validation_s)
            validation_s = env.now - publish_end  # the pause at the iteration boundary included
            self.weights.resume_all()
            book.log("validation_end", step=step)
        book.trained(batch)
        clock.trainer(waiting=False, training_groups=0)
        limit = binding_limit(wait_parts, train_s, publish_end - train_end)
        self.rec.steps.append(attrs.evolve(step_record(
            step, train_version, batch, seq_lens, peak, offload_s,
            (wait_start, batch_ready, train_start, train_end, publish_end), staleness),
            binding_limit=limit, wait_s=wait_parts, phases_s=phases, reward_s=reward_s,
            validation_s=validation_s, mini_batches=mini_batches))
        st.now = env.now
        book.after_publication()
        book.changed.notify()

    def take_mini_batch(self, j: int, size: int) -> list[GroupRecord] | None:
        """The j-th mini-batch of this step: the policy's chunk, else the first ``size`` buffered (FIFO)."""
        st = self.book.st
        if self.chunks:
            return self.book.policy.take_chunk(st, j, size)
        return st.buffer[:size] if len(st.buffer) >= size else None

    def stream(self, step: int):
        """Streaming trainer: k mini-batches of the batch, each trained as soon as its groups are
        buffered (FIFO, or the policy's chunks), on the same weights; the caller publishes after the
        k-th. As verl's FullyAsyncTrainer (volcengine/verl@1d85d951, verl/experimental/fully_async_policy/
        fully_async_trainer.py): ``_get_samples_from_queue`` blocks for ``require_batches x
        ppo_mini_batch_size`` samples, one local step trains them, and
        ``_trigger_parameter_sync_after_step`` syncs (blocking) once ``local_trigger_step`` reaches
        ``trigger_parameter_sync_step``."""
        env, book, st, clock = self.env, self.book, self.book.st, self.clock
        sizes = self.chunks or (self.stream_groups,) * self.extra.trigger_parameter_sync_step
        k = len(sizes)
        batch: list[GroupRecord] = []
        seq_lens: list[int] = []
        wait_parts = dict.fromkeys(WAIT_PARTS, 0.0)
        phases: dict[str, float] = {}
        reward_s = train_s = 0.0
        peak = 0.0
        batch_ready = train_start = -1.0
        train_version = st.version
        for j, mb in enumerate(sizes):
            self.phase = f"waiting for mini-batch {j + 1}/{k} of step {step}"
            clock.trainer(waiting=True)
            spent0 = clock.snapshot()
            while (mini := self.take_mini_batch(j, mb)) is None:
                yield book.changed.wait()
                st.now = env.now
            taken = {g.gid for g in mini}
            st.buffer = [g for g in st.buffer if g.gid not in taken]
            spent1 = clock.snapshot()
            for key in WAIT_PARTS:
                wait_parts[key] += spent1[key] - spent0[key]
            clock.trainer(waiting=False, training_groups=len(mini))
            book.changed.notify()
            if j == 0:
                batch_ready = env.now
            lens = batch_seq_lens(self.workload, mini, book)
            mpeak = self.costs.training.peak_memory_bytes(lens)
            check_memory(step, mpeak, self.costs.training.memory_capacity_bytes())
            peak = max(peak, mpeak)
            st.training = True
            book.log("mini_batch_ready", step=step, mini_batch=j + 1, groups=len(mini))
            t0 = env.now
            r = self.extra.reward_s(sum(len(g.trajs) for g in mini))
            reward_s += r
            if r:
                yield env.timeout(r)
            if j == 0:
                train_start = env.now
            self.phase = f"training mini-batch {j + 1}/{k} of step {step}"
            yield env.timeout(self.costs.training.step_time(lens))
            for key, v in step_phases(self.costs.training, lens).items():
                phases[key] = phases.get(key, 0.0) + v
            train_s += env.now - t0
            st.training = False
            book.changed.notify()
            batch += mini
            seq_lens += lens
        staleness = tuple(g.staleness(train_version) for g in batch)
        return (batch, wait_parts, batch_ready, train_start, env.now, seq_lens, peak, phases, reward_s, train_s,
                staleness, train_version)


def step_record(step: int, train_version: int, batch: list[GroupRecord], seq_lens: list[int], peak: float,
                offload_s: float, times: tuple[float, float, float, float, float],
                staleness: tuple[int, ...]) -> StepRecord:
    wait_start, batch_ready, train_start, train_end, publish_end = times
    completion = sum(g.completion_tokens for g in batch)
    return StepRecord(
        step=step, train_version=train_version, wait_start=wait_start, batch_ready=batch_ready,
        train_start=train_start, train_end=train_end, publish_end=publish_end, groups=len(batch),
        trajectories=sum(len(g.trajs) for g in batch), trained_completion_tokens=completion,
        trained_prompt_tokens=sum(seq_lens) - completion, staleness=staleness,
        gids=tuple(g.gid for g in batch), prompts=tuple(g.wg for g in batch),
        peak_memory_bytes=peak, offload_s=offload_s,
    )
