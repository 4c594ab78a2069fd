"""What a backend driver receives and returns, and the evidence sink it writes through.

`RunContext` is plain data (it round-trips through JSON so the native/container worker gets the
same context as an in-process driver). `EvidenceSink` appends one fsynced JSONL line per update
(``updates.jsonl``) and per model call (``turns.jsonl``); the fields are the bench contract's.
Every line carries the run id, the lease id and its sequence number in its file, so evidence
copied from another run, replayed or duplicated is caught by validation; the controller records
the sha256 of each file in the manifest when the backend is done.

The sink also chains the evidence into the raw log as it is written: each update's log line
carries the sha256 of that update's JSONL line and the count and running sha256 of the turn
lines written before it, and `close` logs both files' line counts and sha256. run.log thus holds
a second, independent copy of every evidence byte's digest: editing, adding, dropping or
reordering a line and resealing the manifest still disagrees with the log (`validate.check_log`).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import attrs

from harness.fsio import JsonlWriter


@attrs.define
class RunContext:
    run_id: str
    run_dir: str
    backend: str
    workload: str
    runtime: str
    rank: int
    seed: int
    settings: dict  # pins.pipeline_settings(...)
    workload_params: dict  # {groups, group_size, knobs}: regenerate with workload_source.generate
    trainer_uuids: list[str]
    inference_uuids: list[str]
    skyrl_batch_size: int = 4
    skyrl_cuda_compat: bool = False
    python: str | None = None
    skyrl_source: str | None = None
    hf_cache: str | None = None
    lease_id: str | None = None
    model_path: str | None = None  # run-local symlink to the model snapshot at the pinned revision

    def to_dict(self) -> dict:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunContext:
        return cls(**d)

    def load_workload(self):
        from harness.workload_source import generate

        p = self.workload_params
        return generate(self.workload, p["groups"], self.seed, group_size=p.get("group_size"), **p.get("knobs", {}))


@attrs.frozen
class BackendOutcome:
    exit_code: int
    native_config: dict
    backend_version: str
    autotuner: dict | None = None  # ART only: {"mode", "healthy", "detail"}
    notes: tuple[str, ...] = ()
    clock: dict | None = None  # {"kind": "monotonic", "origin_unix": t0} or {"kind": "simulated", "end_s": T}

    def to_dict(self) -> dict:
        return attrs.asdict(self)


class EvidenceSink:
    """Appends update and call evidence to ``run_dir``; also logs a line per update.

    ``rank_intervals_native`` on an update says whether its per-rank intervals are the backend's
    own per-rank stamps; only then do trainer rates enter the headline.
    """

    def __init__(self, run_dir: Path, log=None, *, run_id: str, lease_id: str | None, durable: bool = True) -> None:
        self.updates = JsonlWriter(Path(run_dir) / "updates.jsonl", fsync_each=durable)
        self.turns = JsonlWriter(Path(run_dir) / "turns.jsonl", fsync_each=durable)
        self.log = log or (lambda msg: None)
        self.run_id, self.lease_id = run_id, lease_id
        self._seq = {"updates": 0, "turns": 0}
        self._sha = {"updates": hashlib.sha256(), "turns": hashlib.sha256()}
        self._closed = False

    def _stamp(self, kind: str, record: dict) -> dict:
        record.update(run_id=self.run_id, lease_id=self.lease_id, seq=self._seq[kind], wall_time_unix=time.time())
        self._seq[kind] += 1
        return record

    def _write(self, kind: str, record: dict) -> bytes:
        line = getattr(self, kind).append(self._stamp(kind, record))
        self._sha[kind].update(line)
        return line

    def update(self, *, k: int, d_k: float, c_k: float, train_end: float, publish_end: float,
               policy_version: int, groups: int, trajectories: int, tokens: int, group_ids: list[int],
               rank_intervals: dict[str, list[list[float]]], rank_intervals_native: bool, staleness: list[int],
               discards: dict[str, int] | None = None, native: dict[str, Any] | None = None,
               eval_step: bool = False, checkpoint_step: bool = False) -> None:
        line = self._write("updates", {
            "k": k, "d_k": d_k, "c_k": c_k, "train_end": train_end, "publish_end": publish_end,
            "policy_version": policy_version, "groups": groups, "trajectories": trajectories,
            "tokens": tokens, "group_ids": list(group_ids),
            "rank_intervals": {str(r): [list(map(float, iv)) for iv in ivs] for r, ivs in rank_intervals.items()},
            "rank_intervals_native": bool(rank_intervals_native),
            "staleness": list(staleness), "discards": dict(discards or {"stale": 0, "zero_variance": 0}),
            "eval": eval_step, "checkpoint": checkpoint_step, "native": dict(native or {}),
        })
        self.log(f"update {k}: c_k={c_k:.3f} groups={groups} trajectories={trajectories} tokens={tokens} "
                 f"line_sha256={hashlib.sha256(line).hexdigest()} turns={self._seq['turns']} "
                 f"turns_sha256={self._sha['turns'].hexdigest()}")

    def turn(self, *, group: int, trajectory: int, turn: int, forced_tokens: int, completion_tokens: int,
             finish_reason: str | None, prompt_tokens: int, scheduled_prompt_tokens: int, arrival: float,
             first_token: float | None, finish: float | None, policy_version_start: int | None = None,
             policy_version_end: int | None = None) -> None:
        self._write("turns", {
            "group": group, "trajectory": trajectory, "turn": turn, "forced_tokens": forced_tokens,
            "completion_tokens": completion_tokens, "finish_reason": finish_reason,
            "prompt_tokens": prompt_tokens, "scheduled_prompt_tokens": scheduled_prompt_tokens,
            "arrival": arrival, "first_token": first_token, "finish": finish,
            "policy_version_start": policy_version_start, "policy_version_end": policy_version_end,
        })

    def close(self) -> None:
        self.updates.close()
        self.turns.close()
        if not self._closed:
            self._closed = True
            self.log(f"evidence closed: updates={self._seq['updates']} updates_sha256={self._sha['updates'].hexdigest()} "
                     f"turns={self._seq['turns']} turns_sha256={self._sha['turns'].hexdigest()}")
