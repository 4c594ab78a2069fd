"""The `psrl` rollout family: iteration time fitted from an engine's own telemetry.

A real run's per-iteration telemetry (running requests, resident KV tokens, prefilled tokens,
iteration time) arrives as ``iteration`` observations; the model is
``a + b * batch + c * kv_tokens + d * prefill_tokens`` seconds, fitted by non-negative least
squares on relative error (so short decode iterations weigh as much as long prefills). The
fitted model is a `LinearRollout` (``d`` is its ``p``) carrying the fit's validity domain and the
layout it was fitted for, so the fast path can run it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simrl.cost.artifact import domain_of
from simrl.cost.base import CostModelError
from simrl.cost.family import IterationFamily, rollout_kv_tokens, rollout_name
from simrl.cost.fitting import nonneg_lstsq
from simrl.cost.linear import LinearRollout
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


def linear_rollout(coefs: dict, kv_tokens: int, **kw) -> LinearRollout:
    """The `LinearRollout` of psrl coefficients (``d_s_per_prefill_token`` is ``p``)."""
    return LinearRollout(a=float(coefs["a_s"]), b=float(coefs["b_s_per_seq"]), c=float(coefs["c_s_per_kv_token"]),
                         p=float(coefs["d_s_per_prefill_token"]), kv_tokens=int(kv_tokens), **kw)


class PsrlFamily(IterationFamily):
    name = "psrl"
    basis = "linear a + b*batch + c*kv + d*prefill fitted (NNLS) on iteration telemetry of one layout"
    coefficients = {**{k: "number" for k in COEFS}, "kv_capacity_tokens": "number?"}

    def fit_coefficients(self, obs) -> dict:
        return fit_psrl(obs)

    def model(self, coefs, kv_tokens, **kw):
        return linear_rollout(coefs, kv_tokens, **kw)

    def build(self, art, cfg) -> LinearRollout:
        if art is None:
            return super().build(art, cfg)
        dom = domain_of(art, rollout_name(self.name, cfg), cfg.cost.strict)
        ff = {k: v for k, v in (art.get("fitted_for") or {}).items() if k in ("model", "gpu", "tp", "pp")}
        return linear_rollout(art["coefficients"], rollout_kv_tokens(art, cfg), domain=dom, fitted_for=ff)


FAMILY = PsrlFamily()
