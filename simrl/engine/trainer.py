"""The trainer process (docs/model.md, "Trainer and batches").

For each step: wait until the policy forms a batch, train it (step time and peak memory from
the training cost model), then publish the new version through the weight keeper. In
colocated placement the rollout instances pause for the whole step and pay an offload/reload
cost around it. The process only waits; the sums and checks are the pure helpers below.
"""

from __future__ import annotations

import simpy

from simrl.engine.errors import SimulationError
from simrl.engine.groups import GroupBook
from simrl.engine.recorder import Recorder
from simrl.engine.weights import Weights
from simrl.policy.base import GroupRecord
from simrl.report import StepRecord
from workloads.types import Workload


def batch_seq_lens(workload: Workload, batch: list[GroupRecord]) -> list[int]:
    """Trained sequence length of every trajectory: its last call's prompt plus completion."""
    w = workload
    return [
        int(w.call_prompt_tokens[c] + w.call_completion_tokens[c])
        for g in batch for tr in g.trajs for c in [int(w.traj_call_start[tr.tid + 1]) - 1]
    ]


def check_memory(step: int, peak: float, cap: float) -> None:
    if peak > cap:
        raise SimulationError(
            f"training step {step} needs {peak / 2**30:.1f} GiB per GPU but the GPU holds "
            f"{cap / 2**30:.1f} GiB; change deployment.training (tp/pp/cp, gpus, micro_batch_size, "
            "activation_checkpointing)"
        )


class Trainer:
    def __init__(self, env: simpy.Environment, book: GroupBook, weights: Weights, recorder: Recorder,
                 costs, workload: Workload, steps: int, colocated: bool, done: simpy.Event):
        self.env = env
        self.book = book
        self.weights = weights
        self.rec = recorder
        self.costs = costs
        self.workload = workload
        self.steps = steps
        self.colocated = colocated
        self.done = done
        self.phase = "waiting"  # what the trainer is doing, for `srl step` and the diagnosis

    def run(self):
        env, book, st, policy = self.env, self.book, self.book.st, self.book.policy
        for step in range(1, self.steps + 1):
            wait_start = st.now = env.now
            self.phase = "waiting for a batch"
            while (batch := policy.form_batch(st)) is None:
                yield book.changed.wait()
                st.now = env.now
            taken = {g.gid for g in batch}
            st.buffer = [g for g in st.buffer if g.gid not in taken]
            # Taking a batch frees buffer room (queue-depth admission, batch semaphores): re-ask.
            book.changed.notify()
            batch_ready = env.now
            train_version = st.version
            staleness = tuple(g.staleness(train_version) for g in batch)
            seq_lens = batch_seq_lens(self.workload, batch)
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
            train_start = env.now
            self.phase = f"training step {step}"
            book.log("train_start", step=step)
            yield env.timeout(self.costs.training.step_time(seq_lens))
            train_end = env.now
            book.log("train_end", step=step)
            st.training = False
            self.phase = f"publishing version {step}"
            if self.colocated:
                yield from self.weights.colocated_publish(self.costs.offload_after_s(len(self.weights.instances)))
            else:
                yield from self.weights.publish()
            st.steps_done = step
            publish_end = env.now
            book.log("publish_end", step=step, version=st.version)
            book.trained(batch)
            self.rec.steps.append(step_record(
                step, train_version, batch, seq_lens, peak, offload_s,
                (wait_start, batch_ready, train_start, train_end, publish_end), staleness))
            st.now = env.now
            book.after_publication()
            book.changed.notify()
        self.phase = "done"
        self.done.succeed()


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
