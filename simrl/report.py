"""What a run reports: per training step, per call, totals; JSON and Markdown renderings.

The report is a pure value returned by `simrl.simulate`; writing it (atomically, with the
resolved config and telemetry) happens in `simrl.output`. Every number is rounded to fixed
precision before serialisation so that the same config and seed give byte-identical files.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

REPORT_SCHEMA = "simrl.report.v1"


@attrs.frozen
class StepRecord:
    """One training step k (1-based): the batch it trained and when each phase happened.

    Times are simulated seconds from the start of the run. ``batch_ready`` is when the batch
    was handed to the trainer (d_k of the bench contract); ``publish_end`` is when version k
    became usable for rollout (c_k).
    """

    step: int
    train_version: int  # weight version the batch was trained from (= step - 1)
    wait_start: float  # trainer became free and started waiting for a batch
    batch_ready: float
    train_start: float
    train_end: float
    publish_end: float
    groups: int
    trajectories: int
    trained_completion_tokens: int
    trained_prompt_tokens: int
    staleness: tuple[int, ...]  # per trained group: train_version - oldest token version
    gids: tuple[int, ...] = ()  # dispatch serials of the trained groups, in batch order
    prompts: tuple[int, ...] = ()  # their workload group indices (the prompt each sampled)
    peak_memory_bytes: float = 0.0
    offload_s: float = 0.0  # colocated only: offload + reload around training
    # what bound the step (simrl.engine.limits.LIMITS) and its wait for the batch split by cause
    binding_limit: str = ""
    wait_s: dict[str, float] = attrs.field(factory=dict)  # rollout | staleness_bound | concurrency_cap
    phases_s: dict[str, float] = attrs.field(factory=dict)  # the training cost model's phases, if any
    reward_s: float = 0.0  # scoring the batch, trainer-side (batch_ready..train_start, colocated offload apart)
    validation_s: float = 0.0  # validation after publish_end (rollout paused); part of this step
    mini_batches: int = 1  # streaming trainer: mini-batch updates in this step (trained as they arrived)

    @property
    def step_end(self) -> float:
        """When the trainer is free for the next step: publish_end, plus validation if it ran."""
        return self.publish_end + self.validation_s

    @property
    def step_time(self) -> float:
        return self.step_end - self.wait_start


@attrs.frozen
class CallRecord:
    """One model call as executed (after any aborts and resumes)."""

    gid: int
    tid: int
    turn: int
    instance: int  # instance that produced its last token
    arrival: float  # entered the router queue
    first_token: float | None
    finish: float | None
    prompt_tokens: int
    completion_tokens: int  # forced length L
    generated_tokens: int  # tokens it actually produced (== L when finished)
    version_start: int
    version_end: int
    aborts: int = 0
    preemptions: int = 0
    finish_reason: str = "length"  # length | aborted | in_flight


@attrs.frozen
class Report:
    schema: str
    run_name: str
    policy: str
    seed: int
    workload: dict[str, Any]
    steps: tuple[StepRecord, ...]
    calls: tuple[CallRecord, ...]
    totals: dict[str, Any]
    instances: tuple[dict[str, Any], ...]
    domain_warnings: tuple[dict[str, Any], ...] = ()
    diagnosis: str | None = None  # set when the run stopped early (deadlock, horizon)
    # per role: family, source, what it was fitted on, GPU / layout, out-of-domain queries
    cost_provenance: tuple[dict[str, Any], ...] = ()
    # (t, groups in flight, groups buffered, groups being trained, {oldest version: buffered groups})
    queue_depth: tuple[tuple, ...] = ()
    # colocated placement: seconds of each GPU-switch phase per step, in order (simrl.cost.colocated);
    # empty when rollout and training have their own GPUs
    colocated_phases: dict[str, float] = attrs.field(factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _round(attrs.asdict(self, recurse=True))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1) + "\n"


def _round(obj: Any) -> Any:
    if isinstance(obj, float):
        return float(f"{obj:.9g}")
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_round(v) for v in obj]
    return obj
