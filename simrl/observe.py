"""The observable record both engines produce, and the one the differential tests compare.

Per training step: when it waited, when its batch was ready, when training ended, when the new
version was published (the step's completion time), the version it trained from, how many
groups it took and their staleness histogram, the trained completion tokens and the trainer's
busy time. `from_report` builds it from a SimPy `Report`; `simrl_fast.observe.from_fast` builds
the same record from the JAX engine's results. Buffer depth and per-instance rollout busy time
are SimPy-only today (the JAX state has no leaf for them), so they are not in the record yet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import attrs


def histogram(staleness: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """((staleness, groups), ...) sorted by staleness."""
    return tuple(sorted(Counter(int(s) for s in staleness).items()))


@attrs.frozen
class StepObservation:
    step: int
    train_version: int
    wait_start: float
    batch_ready: float
    train_end: float
    publish_end: float  # the step's completion time: version train_version + 1 is usable
    groups: int
    staleness_histogram: tuple[tuple[int, int], ...]
    trained_completion_tokens: int
    trainer_busy_s: float  # train_end - train_start (colocated: the pause and offload before training excluded)

    TIMES = ("wait_start", "batch_ready", "train_end", "publish_end", "trainer_busy_s")


@attrs.frozen
class Observables:
    steps: tuple[StepObservation, ...]
    complete: bool  # every requested training step ran

    def mismatches(self, other: Observables, rel: float = 1e-9) -> list[str]:
        """Where ``other`` differs: discrete fields exactly, times to a relative tolerance."""
        out = []
        if self.complete != other.complete:
            out.append(f"complete {self.complete} != {other.complete}")
        if len(self.steps) != len(other.steps):
            return [*out, f"steps {len(self.steps)} != {len(other.steps)}"]
        for a, b in zip(self.steps, other.steps, strict=True):
            for f in attrs.fields(StepObservation):
                x, y = getattr(a, f.name), getattr(b, f.name)
                if f.name in StepObservation.TIMES:
                    if abs(x - y) > rel * max(abs(y), 1e-12) and abs(x - y) >= 1e-12:
                        out.append(f"step {a.step} {f.name}: {x!r} vs {y!r}")
                elif x != y:
                    out.append(f"step {a.step} {f.name}: {x!r} vs {y!r}")
        return out


def from_report(report) -> Observables:
    steps = tuple(
        StepObservation(
            step=s.step, train_version=s.train_version, wait_start=s.wait_start, batch_ready=s.batch_ready,
            train_end=s.train_end, publish_end=s.publish_end, groups=s.groups,
            staleness_histogram=histogram(s.staleness), trained_completion_tokens=s.trained_completion_tokens,
            trainer_busy_s=s.train_end - s.train_start,
        )
        for s in report.steps
    )
    return Observables(steps=steps, complete=report.diagnosis is None)
