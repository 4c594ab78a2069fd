"""The narrow ports between the engine's parts, and the change signal they share.

A rollout instance and the router see only these small protocols, never the `Simulation`:
the instance reports what happened to its calls (`CallPort`) and asks the weight keeper
whether to pull (`PullPort`); the router sees instances through `RoutableInstance` and
asks the instance itself to report its new load. This keeps `simrl.engine` free of import circles.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Protocol

import simpy

from simrl.engine.records import Request


class Changed:
    """One SimPy event that fires when something the dispatcher or trainer waits on changed."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.event = env.event()

    def notify(self) -> None:
        if not self.event.triggered:
            self.event.succeed()

    def wait(self) -> simpy.Event:
        if self.event.triggered:
            self.event = self.env.event()
        return self.event


class CallPort(Protocol):
    """What an instance reports about its calls (implemented by the group book)."""

    def on_admit(self, instance: int, version: int, r: Request) -> None: ...
    def on_preempt(self, instance: int, r: Request) -> None: ...
    def on_discard(self, r: Request, tokens: int) -> None: ...
    def on_finished(self, instance: int, r: Request) -> None: ...


class LoadPort(Protocol):
    """Where an instance reports that its queues changed (the occupancy samples)."""

    def sample(self, instance: int, waiting: int, running: int, kv_used: int) -> None: ...


class PullPort(Protocol):
    """Per-instance weight sync, asked at every turn of an instance's loop."""

    def wants_pull(self, instance) -> bool: ...
    def pull(self, instance) -> Generator: ...


class RoutableInstance(Protocol):
    """An instance as the router sees it."""

    index: int
    version: int

    @property
    def assigned(self) -> int: ...
    def outstanding_tokens(self) -> int: ...
    def kv_free(self) -> int: ...
    def cached_prefix(self, req: Request) -> int: ...
    def enqueue(self, req: Request, front: bool = False) -> None: ...
    def sample(self) -> None: ...
