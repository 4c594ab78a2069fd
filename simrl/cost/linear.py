"""Linear cost models: the closed form the analytic tests, the fitted `psrl` family and the fast
path share.

`LinearRollout`: one iteration takes ``a + b*batch + c*kv_tokens + p*prefill_tokens`` seconds
(DistServe-style decode plus a per-token prefill term); KV capacity is given in tokens. It
carries the `ValidityDomain` of a fit (unbounded when the coefficients are given as knobs) and
``fitted_for``, the layout (model, gpu, tp, pp) its coefficients describe; `linear_coefficients`
hands both to the fast path, which rejects another layout by name.
`ConstantTraining`: a step takes ``a + per_token*tokens`` seconds. `ConstantSync`: a fixed
publication time.

Families here: rollout ``linear`` (coefficients as knobs: ``cost.rollout_knobs.{a,b,c,p,
kv_tokens}``; ``cost.rollout_knobs.fitted_for.tp`` / ``.pp`` declare the layout they describe,
tp=1 pp=1 unless set, so a sweep over ``deployment.rollout.tp`` is refused instead of silently
reusing one layout's coefficients) and training ``constant`` (``a``, ``per_token``).
"""

from __future__ import annotations

from typing import Any

import attrs

from simrl.cost.base import CostModelError, ValidityDomain
from simrl.cost.family import FamilyBase, check_fitted_for, check_gpu, check_knobs, construct

LAYOUT_KEYS = ("model", "gpu", "tp", "pp")


@attrs.frozen
class LinearForm:
    """What the fast path needs of a linear rollout model: the four coefficients, the layout the
    coefficients describe (empty: any) and whether a validity domain bounds the queries."""

    a: float
    b: float
    c: float
    p: float
    fitted_for: dict[str, Any] = attrs.field(factory=dict)
    bounded_domain: bool = False


@attrs.define
class LinearRollout:
    a: float = 0.005  # seconds per iteration
    b: float = 2e-5  # seconds per running sequence
    c: float = 1e-8  # seconds per resident KV token
    p: float = 5e-5  # seconds per prefilled token
    kv_tokens: int = 1_000_000
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("rollout/linear"))
    fitted_for: dict[str, Any] = attrs.field(factory=dict)  # model / gpu / tp / pp the coefficients describe

    def iteration_time(self, batch_size: int, kv_tokens: int, prefill_tokens: int) -> float:
        if self.domain.ranges:
            self.domain.check("batch_size", batch_size)
            self.domain.check("kv_tokens", kv_tokens)
            self.domain.check("prefill_tokens", prefill_tokens)
        # The fast path evaluates the same expression in the same order (bit-identical times).
        return self.a + self.b * batch_size + self.c * kv_tokens + self.p * prefill_tokens

    def kv_slope(self, batch_size: int) -> float:
        """Growth of ``iteration_time(batch_size, kv, 0)`` per KV token: ``c`` at every batch (the
        engines' closed-form iteration boundaries, `simrl.engine.instance.boundary_time`)."""
        return self.c

    def kv_capacity_tokens(self) -> int:
        return self.kv_tokens

    def linear_coefficients(self) -> LinearForm:
        return LinearForm(float(self.a), float(self.b), float(self.c), float(self.p), dict(self.fitted_for),
                          bool(self.domain.ranges))


@attrs.define
class ConstantTraining:
    a: float = 10.0  # seconds per step
    per_token: float = 0.0  # seconds per trained token (prompt + completion)
    capacity_bytes: float = 80e9
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("training/constant"))

    def step_time(self, seq_lens: list[int]) -> float:
        return self.a + self.per_token * sum(seq_lens)

    def peak_memory_bytes(self, seq_lens: list[int]) -> float:
        return 0.0

    def memory_capacity_bytes(self) -> float:
        return self.capacity_bytes

    def linear_coefficients(self) -> tuple[float, float]:
        """(a, per_token): the step time is exactly ``a + per_token * sum(seq_lens)``."""
        return float(self.a), float(self.per_token)


@attrs.define
class ConstantSync:
    seconds: float = 1.0
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("weight_sync/constant"))

    def publish_time(self, n_instances: int) -> float:
        return self.seconds


class LinearRolloutFamily(FamilyBase):
    """Rollout ``linear``: the closed form with its coefficients given as knobs."""

    target, name, from_knobs = "rollout", "linear", True
    basis = "closed form a + b*batch + c*kv + p*prefill, coefficients given as knobs"

    def build(self, art: dict | None, cfg) -> LinearRollout:
        if art is not None:
            return super().build(art, cfg)
        knobs = dict(cfg.cost.rollout_knobs)
        declared = knobs.pop("fitted_for", None)
        fitted_for = {"tp": 1, "pp": 1}
        if declared is not None:
            if not isinstance(declared, dict):
                raise CostModelError(f"cost.rollout_knobs.fitted_for: expected a mapping of {', '.join(LAYOUT_KEYS)}, "
                                     f"got {declared!r}")
            check_knobs("rollout", "linear", {f"fitted_for.{k}": v for k, v in declared.items()},
                        [f"fitted_for.{k}" for k in LAYOUT_KEYS])
            fitted_for.update(declared)
        model = construct("rollout", "linear", LinearRollout, knobs)
        model.fitted_for = fitted_for
        where = "cost.rollout=linear (cost.rollout_knobs.fitted_for)"
        check_fitted_for(fitted_for, LAYOUT_KEYS, cfg, "rollout", where,
                         hint="give coefficients for {key}={have} and declare them: "
                              "cost.rollout_knobs.fitted_for.{key}={have}")
        if fitted_for.get("gpu"):
            from simrl.cost.hardware import gpu_spec

            check_gpu(gpu_spec(fitted_for["gpu"]).name, cfg, "rollout", where)
        return model


class ConstantTrainingFamily(FamilyBase):
    """Training ``constant``: ``a + per_token * tokens`` seconds with the coefficients as knobs."""

    target, name, from_knobs = "training", "constant", True
    basis = "closed form a + per_token*tokens, coefficients given as knobs"

    def build(self, art: dict | None, cfg) -> ConstantTraining:
        if art is not None:
            return super().build(art, cfg)
        return construct("training", "constant", ConstantTraining, dict(cfg.cost.training_knobs))


FAMILIES = (LinearRolloutFamily(), ConstantTrainingFamily())
