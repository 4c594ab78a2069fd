"""The `distserve` rollout family (DistServe's estimator form), fitted from iteration observations.

Prefill: ``a_p + b_p * sum(l) + c_p * sum(l**2)`` over the prompt lengths ``l`` prefilled in the
iteration. Decode: ``a_d + b_d * sum(ctx) + c_d * batch``, with one coefficient set below a
batch-size threshold and another at or above it (piecewise). An iteration that does both pays
both. At query time the engine passes only ``prefill_tokens``; it is treated as one prompt
(``sum(l**2) = prefill_tokens**2``), the same convention as the composed model. Observations may
carry ``inputs.prefill_lens`` (a list) to fit the quadratic term exactly.

Coefficients are fitted by non-negative least squares on relative error; the threshold is chosen
from the observed batch sizes by the smallest fitted error.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from simrl.cost.artifact import domain_of
from simrl.cost.base import CostModelError, ValidityDomain, finite_nonneg
from simrl.cost.family import IterationFamily, rollout_kv_tokens, rollout_name
from simrl.cost.fitting import nonneg_lstsq
from simrl.cost.observations import Observation

COEFS = ("prefill_a_s", "prefill_b_s_per_token", "prefill_c_s_per_token2",
         "decode_lo_a_s", "decode_lo_b_s_per_kv_token", "decode_lo_c_s_per_seq",
         "decode_hi_a_s", "decode_hi_b_s_per_kv_token", "decode_hi_c_s_per_seq")


def features(batch: float, kv_tokens: float, prefill_lens: Sequence[float], threshold: float) -> np.ndarray:
    lens = np.asarray(prefill_lens, float)
    pre = [1.0, lens.sum(), float((lens**2).sum())] if lens.sum() > 0 else [0.0, 0.0, 0.0]
    dec = [1.0, float(kv_tokens), float(batch)] if batch > 0 else [0.0, 0.0, 0.0]
    lo, hi = (dec, [0.0] * 3) if batch < threshold else ([0.0] * 3, dec)
    return np.array(pre + lo + hi)


def iteration_rows(obs: Sequence[Observation]) -> tuple[list[tuple[float, float, list[float]]], np.ndarray]:
    rows, ys = [], []
    for o in obs:
        if o.kind != "iteration":
            continue
        inp = o.inputs
        lens = inp.get("prefill_lens") or ([inp["prefill_tokens"]] if inp["prefill_tokens"] else [])
        rows.append((float(inp["batch_size"]), float(inp["kv_tokens"]), [float(x) for x in lens]))
        ys.append(o.value)
    return rows, np.array(ys)


def fit_distserve(obs: Sequence[Observation], threshold: float | None = None) -> dict:
    """Coefficients (named as in `COEFS`) plus ``batch_threshold`` from iteration observations."""
    rows, y = iteration_rows(obs)
    if len(rows) < 3:
        raise CostModelError(f"distserve fit needs >= 3 iteration observations, got {len(rows)}")
    batches = sorted({b for b, _, _ in rows if b > 0})
    # Any threshold between two observed batch sizes gives the same split: try the observed ones.
    splits = batches[1:] if len(batches) <= 512 else np.unique(np.quantile(batches, np.linspace(0.02, 0.98, 49)))
    candidates = [threshold] if threshold is not None else [float("inf"), *(float(b) for b in splits)]
    best = None
    for th in candidates:
        a = np.stack([features(b, kv, lens, th) for b, kv, lens in rows])
        x = nonneg_lstsq(a, y, weights=1.0 / y)
        err = float(np.median(np.abs(a @ x - y) / y))
        if best is None or err < best[0] - 1e-12:
            best = (err, th, x)
    _, th, x = best
    if not np.isfinite(th):  # no split: both halves share one set
        x[6:9] = x[3:6]
        th = float(max(batches, default=1)) + 1
    return {**{k: float(v) for k, v in zip(COEFS, x, strict=True)}, "batch_threshold": float(th)}


@attrs.define
class DistServeRollout:
    """Iteration time from DistServe-form prefill and piecewise decode terms."""

    coefficients: dict[str, float]
    kv_tokens: int
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("rollout/distserve"))

    def iteration_time(self, batch_size: int, kv_tokens: int, prefill_tokens: int) -> float:
        for dim, val in (("batch_size", batch_size), ("kv_tokens", kv_tokens), ("prefill_tokens", prefill_tokens)):
            self.domain.check(dim, val)
        c = self.coefficients
        x = features(batch_size, kv_tokens, [prefill_tokens] if prefill_tokens else [], c["batch_threshold"])
        t = float(x @ np.array([c[k] for k in COEFS]))
        return finite_nonneg("distserve iteration_time", t)

    def kv_capacity_tokens(self) -> int:
        return self.kv_tokens


class DistServeFamily(IterationFamily):
    name = "distserve"
    basis = "DistServe form: quadratic prefill, piecewise-linear decode, fitted on iteration telemetry of one layout"
    coefficients = {**{k: "number" for k in COEFS}, "batch_threshold": "number", "kv_capacity_tokens": "number?"}

    def fit_coefficients(self, obs) -> dict:
        return fit_distserve(obs)

    def model(self, coefs, kv_tokens, **kw):
        return DistServeRollout(coefs, kv_tokens, **kw)

    def build(self, art, cfg) -> DistServeRollout:
        if art is None:
            return super().build(art, cfg)
        dom = domain_of(art, rollout_name(self.name, cfg), cfg.cost.strict)
        return DistServeRollout(art["coefficients"], rollout_kv_tokens(art, cfg), domain=dom)


FAMILY = DistServeFamily()
