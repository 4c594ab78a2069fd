"""What the fast engine returns per configuration (numpy), and summaries matching the report's.

Per step: wait_start, batch_ready, train_start (= batch_ready unless colocated), train_end,
publish_end, batch gids and staleness, trained tokens, offload_s (colocated); per call (by dispatch serial rid = gid * n + sample): finish time
and instance; per configuration: makespan, flags. `summary(m)` gives the report totals the
sweep writes (makespan, mean step time, trained tokens/s, staleness mean and max).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class FastResults(NamedTuple):
    steps: np.ndarray  # [M] int32: training steps requested
    steps_done: np.ndarray  # [M] int32
    wait_start: np.ndarray  # [M, P] f64
    batch_ready: np.ndarray  # [M, P] f64
    train_start: np.ndarray  # [M, P] f64 (= batch_ready; colocated: after the pause and offload_before_s)
    train_end: np.ndarray  # [M, P] f64
    publish_end: np.ndarray  # [M, P] f64
    gids: np.ndarray  # [M, P, B] int32 (-1 padding)
    stale: np.ndarray  # [M, P, B] int32 (-1 padding)
    completion_tokens: np.ndarray  # [M, P] int64
    seq_tokens: np.ndarray  # [M, P] int64
    offload_s: np.ndarray  # [M, P] f64: StepRecord.offload_s (colocated: Costs.offload_s; else 0)
    call_finish: np.ndarray  # [M, R] f64 (nan: not finished)
    call_inst: np.ndarray  # [M, R] int32 (-1: not routed)
    group_finish: np.ndarray  # [M, Gm] f64
    groups_dispatched: np.ndarray  # [M] int32
    groups_accepted: np.ndarray  # [M] int32: PipelineState.groups_accepted (buffered or trained, ever)
    stuck: np.ndarray  # [M] bool: deadlocked before the last step (SimPy reports a diagnosis)
    overflow: np.ndarray  # [M] bool
    actions: np.ndarray  # [M] int32: scan steps that did something
    preemptions: np.ndarray  # [M, K] int32: per instance, Instance.preemptions (on_demand KV)
    cache_tokens: np.ndarray  # [M, K] int64: per instance, Instance.cache_tokens at the end (prefix cache)
    zero_stop: np.ndarray  # [M] bool: the record's zero_variance_stop_groups fired (SimPy stops with an error)

    @classmethod
    def from_state(cls, st, steps, static, per_call) -> FastResults:
        """``per_call``: (call finish, call instance, group finish), assembled from the steps' outputs."""
        lg = st.log
        call_finish, call_inst, group_finish = per_call
        return cls(
            steps=np.asarray(steps), steps_done=np.asarray(st.trainer.step), wait_start=lg.wait_start,
            batch_ready=lg.batch_ready, train_start=lg.train_start, train_end=lg.train_end,
            publish_end=lg.publish_end, gids=lg.gids, stale=lg.stale, completion_tokens=lg.completion_tokens,
            seq_tokens=lg.seq_tokens, offload_s=lg.offload_s,
            call_finish=call_finish, call_inst=call_inst, group_finish=group_finish,
            groups_dispatched=st.dispatched, groups_accepted=st.accepted, stuck=st.stuck, overflow=st.overflow, actions=st.actions,
            preemptions=st.inst.preempt, cache_tokens=st.inst.cache_tok, zero_stop=st.zstop,
        )

    @classmethod
    def concat(cls, parts: list[FastResults]) -> FastResults:
        return cls(*(np.concatenate([getattr(r, f) for r in parts]) for f in cls._fields))

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def complete(self) -> np.ndarray:
        return self.steps_done >= self.steps

    def makespan(self, m: int) -> float:
        k = int(self.steps_done[m])
        return float(self.publish_end[m, k - 1]) if k else 0.0

    def summary(self, m: int) -> dict:
        """Report-style totals of configuration ``m`` (as `simrl.engine.sim.summarise` computes them)."""
        k = int(self.steps_done[m])
        end = self.makespan(m)
        stale = self.stale[m, :k]
        stale = stale[stale >= 0]
        trained = int(self.completion_tokens[m, :k].sum())
        step_times = self.publish_end[m, :k] - self.wait_start[m, :k]
        return {
            "makespan_s": end,
            "training_steps": k,
            "step_time_mean_s": float(np.mean(step_times)) if k else 0.0,
            "tokens_trained": trained,
            "trained_tokens_per_s": trained / max(end, 1e-12),
            "staleness_mean": float(np.mean(stale)) if len(stale) else 0.0,
            "staleness_max": int(stale.max()) if len(stale) else 0,
            "complete": bool(k >= int(self.steps[m])),
        }
