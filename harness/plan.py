"""Run plans: the comparison suite is four workloads x two backends, run serially in this order."""

from __future__ import annotations

from harness.errors import BenchError
from harness.pins import BACKENDS, WORKLOADS

SUITES = ("comparison",)


def plan(suite: str) -> list[tuple[str, str]]:
    if suite != "comparison":
        raise BenchError(f"unknown suite {suite!r} (known: {', '.join(SUITES)})")
    return [(b, w) for b in BACKENDS for w in WORKLOADS]
