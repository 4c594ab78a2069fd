"""The cost-model seam: what the engine asks of rollout, training and weight-sync models.

Units: seconds, tokens, bytes. A cost model is built once when a run starts (from a family
name or a fitted artifact) and then queried in the simulation loop with no file I/O.
Every model carries a `ValidityDomain`; queries outside it are counted (and warned once per
dimension with a `CostModelWarning`), or raise `OutOfDomainError` in strict mode. No model ever
falls back silently to another one.

A rollout model whose iteration time is exactly ``a + b*batch + c*kv + p*prefill`` may also
expose ``linear_coefficients() -> LinearForm`` (`simrl.cost.linear`); a training model whose
step time is exactly ``a + per_token*tokens`` (and has no memory limit to check) may expose
``linear_coefficients() -> (a, per_token)``. The fast path (`simrl_fast.lowering`) asks for
these instead of checking types, so any family that lowers to the linear form reaches it.

A rollout model whose iteration time at a fixed batch and no prefill is exactly affine in the
KV tokens may expose ``kv_slope(batch_size) -> float | None`` (the growth per KV token; None at
a batch where it is not affine): the engine then computes the iteration boundaries between two
observable events in closed form (`simrl.engine.instance.boundary_time`, the same expression
the fast path evaluates), instead of summing iteration times one by one.
"""

from __future__ import annotations

import math
import warnings
from typing import Protocol, runtime_checkable

import attrs


class OutOfDomainError(ValueError):
    """A cost-model query left the validity domain while strict mode was on."""


class CostModelError(ValueError):
    """A cost model cannot be built or cannot answer (e.g. the layout does not fit memory)."""


class CostModelWarning(UserWarning):
    """A cost model is used outside what it was fitted for (domain, GPU); the run goes on.

    The category lets a CLI print these as one-line warnings (no source line) and lets tests
    and users filter them; ``cost.strict=true`` turns the same conditions into errors.
    """


@attrs.define
class ValidityDomain:
    """Closed ranges ``{dimension: (lo, hi)}`` a model was fitted on, plus out-of-domain counts.

    ``strict`` turns the first out-of-domain query into an `OutOfDomainError`.
    """

    model: str
    ranges: dict[str, tuple[float, float]] = attrs.field(factory=dict)
    strict: bool = False
    counts: dict[str, int] = attrs.field(factory=dict)
    worst: dict[str, float] = attrs.field(factory=dict)

    def check(self, dim: str, value: float) -> None:
        rng = self.ranges.get(dim)
        if rng is None:
            return
        lo, hi = rng
        if lo <= value <= hi:
            return
        if self.strict:
            raise OutOfDomainError(
                f"{self.model}: {dim}={value:g} is outside the validity domain [{lo:g}, {hi:g}]"
            )
        if dim not in self.counts:
            warnings.warn(
                f"{self.model}: {dim}={value:g} outside validity domain [{lo:g}, {hi:g}] "
                "(further queries counted in the run report)",
                CostModelWarning,
                stacklevel=3,
            )
            self.counts[dim] = 0
        self.counts[dim] += 1
        prev = self.worst.get(dim)
        if prev is None or abs(value - (lo if value < lo else hi)) > abs(prev - (lo if prev < lo else hi)):
            self.worst[dim] = value

    def report(self) -> list[dict]:
        """Out-of-domain queries so far, one entry per dimension (for the run report)."""
        return [
            {
                "model": self.model,
                "dimension": d,
                "range": list(self.ranges[d]),
                "queries_outside": n,
                "worst_value": self.worst[d],
            }
            for d, n in sorted(self.counts.items())
        ]

    def to_dict(self) -> dict:
        return {d: [lo, hi] for d, (lo, hi) in sorted(self.ranges.items())}

    def outside(self) -> dict:
        """How far the queries so far left the domain: total count and, per dimension, the
        count, the range and the worst value (for the run's cost-provenance table)."""
        return {
            "queries_outside": sum(self.counts.values()),
            "dimensions": {d: {"queries": n, "range": list(self.ranges[d]), "worst_value": self.worst[d]}
                           for d, n in sorted(self.counts.items())},
        }


@runtime_checkable
class RolloutCost(Protocol):
    """Cost of one rollout instance (one engine replica with its TP/PP/EP layout)."""

    domain: ValidityDomain

    def iteration_time(self, batch_size: int, kv_tokens: int, prefill_tokens: int) -> float:
        """Seconds for one continuous-batching iteration.

        ``batch_size`` sequences each decode one token while ``kv_tokens`` (summed prompt +
        generated tokens of those sequences) are resident; ``prefill_tokens`` new, uncached
        prompt tokens are prefilled in the same iteration. Either part may be zero.
        """
        ...

    def kv_capacity_tokens(self) -> int:
        """KV-cache capacity of the instance in tokens (after weights and activations)."""
        ...


@runtime_checkable
class TrainingCost(Protocol):
    """Cost of one training step on the training GPUs with their TP/PP/DP/CP/EP layout."""

    domain: ValidityDomain

    def step_time(self, seq_lens: list[int]) -> float:
        """Seconds for one optimizer step over samples of the given total lengths (tokens)."""
        ...

    def peak_memory_bytes(self, seq_lens: list[int]) -> float:
        """Peak bytes on the most loaded training GPU for that batch."""
        ...

    def memory_capacity_bytes(self) -> float:
        """Usable bytes per training GPU."""
        ...


@runtime_checkable
class WeightSyncCost(Protocol):
    """Cost of publishing new policy weights to the rollout instances."""

    domain: ValidityDomain

    def publish_time(self, n_instances: int) -> float:
        """Seconds from the end of a training step until the new weights are usable."""
        ...


def finite_nonneg(name: str, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise CostModelError(f"{name} produced {value!r}; expected a finite, non-negative number")
    return value
