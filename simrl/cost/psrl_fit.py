"""The `psrl` rollout family: iteration time fitted from an engine's own telemetry.

A real run's per-iteration telemetry (running requests, resident KV tokens, prefilled tokens,
iteration time) arrives as ``iteration`` observations; the model is
``a + b * batch + c * kv_tokens + d * prefill_tokens`` seconds, fitted by non-negative least
squares on relative error (so short decode iterations weigh as much as long prefills).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from simrl.cost.base import CostModelError, ValidityDomain, finite_nonneg
from simrl.cost.fitting import nonneg_lstsq
from simrl.cost.observations import Observation

COEFS = ("a_s", "b_s_per_seq", "c_s_per_kv_token", "d_s_per_prefill_token")


def _row(batch: float, kv: float, prefill: float) -> np.ndarray:
    return np.array([1.0, batch, kv, prefill])


def fit_psrl(obs: Sequence[Observation]) -> dict[str, float]:
    its = [o for o in obs if o.kind == "iteration"]
    if len(its) < len(COEFS):
        raise CostModelError(f"psrl fit needs >= {len(COEFS)} iteration observations, got {len(its)}")
    a = np.stack([_row(o.inputs["batch_size"], o.inputs["kv_tokens"], o.inputs["prefill_tokens"]) for o in its])
    y = np.array([o.value for o in its])
    x = nonneg_lstsq(a, y, weights=1.0 / y)
    return {k: float(v) for k, v in zip(COEFS, x, strict=True)}


@attrs.define
class PsrlRollout:
    """``a + b*batch + c*kv + d*prefill`` seconds per iteration, fitted from telemetry."""

    coefficients: dict[str, float]
    kv_tokens: int
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("rollout/psrl"))

    def iteration_time(self, batch_size: int, kv_tokens: int, prefill_tokens: int) -> float:
        for dim, val in (("batch_size", batch_size), ("kv_tokens", kv_tokens), ("prefill_tokens", prefill_tokens)):
            self.domain.check(dim, val)
        c = self.coefficients
        x = _row(batch_size, kv_tokens, prefill_tokens)
        return finite_nonneg("psrl iteration_time", float(x @ np.array([c[k] for k in COEFS])))

    def kv_capacity_tokens(self) -> int:
        return self.kv_tokens
