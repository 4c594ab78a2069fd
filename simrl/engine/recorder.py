"""The telemetry of one run: events, instance samples, finished calls and training steps.

Every process records through one `Recorder`; nothing else keeps run history. Events are
plain dicts (``t``, ``kind``, fields) written to telemetry.jsonl in order; samples are taken
whenever an instance's queues change (the instance-load plot).
"""

from __future__ import annotations

from typing import NamedTuple

from simrl.report import CallRecord, StepRecord


class Sample(NamedTuple):
    """One instance's load at one moment."""

    t: float
    instance: int
    waiting: int  # calls in its waiting queue
    running: int  # calls in its batch
    kv_used: int  # KV tokens in use (cached prefixes excluded)
    router_queue: int  # calls in the router's queue


class Recorder:
    def __init__(self, telemetry: bool):
        self.telemetry = telemetry
        self.events: list[dict] = []
        self.samples: list[Sample] = []
        self.calls: list[CallRecord] = []
        self.steps: list[StepRecord] = []

    def log(self, t: float, kind: str, **fields) -> None:
        if self.telemetry:
            self.events.append({"t": t, "kind": kind, **fields})

    def sample(self, t: float, instance: int, waiting: int, running: int, kv_used: int, router_queue: int) -> None:
        self.samples.append(Sample(t, instance, waiting, running, kv_used, router_queue))
