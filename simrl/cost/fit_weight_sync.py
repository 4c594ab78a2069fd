"""The weight-sync families: the analytical modes of `simrl.cost.weight_sync` and the fitted model.

Modes (``cost.weight_sync=nccl|checkpoint_engine|filesystem|lora|fixed``, knobs in
``cost.weight_sync_knobs``) are `WeightSync`; the ``fitted`` family (an artifact) is
`FittedWeightSync`, bytes over an effective bandwidth plus a per-bucket latency:

``publish_time = latency_s * buckets + bytes / bytes_per_s + (n_instances - 1) * bytes /
fanout_bytes_per_s``: weights travel in ``buckets`` chunks (each paying a fixed latency), at an
effective bandwidth, plus an extra term per additional receiving instance (zero when the fit
finds a broadcast whose time does not grow with the fleet). Fitted by non-negative least
squares on relative error from ``weight_sync`` observations (``inputs.bytes``,
``inputs.n_instances``, optional ``inputs.buckets``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np

from simrl.cost.artifact import domain_of
from simrl.cost.base import CostModelError, ValidityDomain, finite_nonneg
from simrl.cost.family import FamilyBase, check_knobs, knobs_of, value_range
from simrl.cost.fitting import nonneg_lstsq
from simrl.cost.observations import Observation


def _row(bytes_: float, n_instances: float, buckets: float) -> np.ndarray:
    return np.array([buckets, bytes_, bytes_ * max(n_instances - 1, 0)])


def fit_weight_sync(obs: Sequence[Observation]) -> dict[str, float]:
    ws = [o for o in obs if o.kind == "weight_sync"]
    if len(ws) < 3:
        raise CostModelError(f"weight_sync fit needs >= 3 weight_sync observations, got {len(ws)}")
    a = np.stack([_row(o.inputs["bytes"], o.inputs["n_instances"], o.inputs.get("buckets", 1)) for o in ws])
    y = np.array([o.value for o in ws])
    lat, inv_bw, inv_fan = nonneg_lstsq(a, y, weights=1.0 / y)
    bucket_bytes = float(np.median([o.inputs["bytes"] / max(o.inputs.get("buckets", 1), 1) for o in ws]))
    return {
        "latency_s_per_bucket": float(lat),
        "bytes_per_s": float(1.0 / inv_bw) if inv_bw > 0 else 1e30,
        "fanout_bytes_per_s": float(1.0 / inv_fan) if inv_fan > 0 else 1e30,
        "bucket_bytes": bucket_bytes,
    }


@attrs.define
class FittedWeightSync:
    """Publication time of ``weight_bytes`` to ``n_instances`` rollout instances."""

    coefficients: dict[str, float]
    weight_bytes: float
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("weight_sync/fitted"))

    def time_for(self, bytes_: float, n_instances: int, buckets: float | None = None) -> float:
        c = self.coefficients
        if buckets is None:
            buckets = max(1, math.ceil(bytes_ / c["bucket_bytes"]))
        x = _row(bytes_, n_instances, buckets)
        coef = np.array([c["latency_s_per_bucket"], 1.0 / c["bytes_per_s"], 1.0 / c["fanout_bytes_per_s"]])
        return finite_nonneg("weight_sync publish_time", float(x @ coef))

    def publish_time(self, n_instances: int) -> float:
        self.domain.check("bytes", self.weight_bytes)
        self.domain.check("n_instances", n_instances)
        return self.time_for(self.weight_bytes, n_instances)


class FittedSyncFamily(FamilyBase):
    target, name, fittable = "weight_sync", "fitted", True
    domain_dims = ("bytes", "n_instances")
    basis = "latency*buckets + bytes/bandwidth + (n-1)*bytes/fan-out bandwidth, fitted"
    coefficients = {"latency_s_per_bucket": "number", "bytes_per_s": "number", "fanout_bytes_per_s": "number",
                    "bucket_bytes": "number"}

    def fit(self, obs, opts):
        coefs = fit_weight_sync(obs)
        ws = [o for o in obs if o.kind == "weight_sync"]
        return coefs, {"bytes": value_range([o.inputs["bytes"] for o in ws]),
                       "n_instances": value_range([o.inputs["n_instances"] for o in ws])}

    def predict(self, art, obs, opts):
        m = FittedWeightSync(art["coefficients"], 0.0)
        pred, act = [], []
        for o in obs:
            if o.kind == "weight_sync":
                i = o.inputs
                pred.append(m.time_for(i["bytes"], int(i["n_instances"]), i.get("buckets", 1)))
                act.append(o.value)
        return np.array(pred), np.array(act), ["weight_sync"] * len(pred)

    def build(self, art, cfg):
        if art is None:
            return super().build(art, cfg)
        from simrl.cost.architectures import model_arch

        dom = domain_of(art, f"weight_sync/fitted[{cfg.deployment.model}]", cfg.cost.strict)
        return FittedWeightSync(art["coefficients"], model_arch(cfg.deployment.model).weight_bytes(2), domain=dom)


class WeightSyncModeFamily(FamilyBase):
    """One analytical mode of `simrl.cost.weight_sync.WeightSync`, knobs over the mode defaults."""

    target, from_knobs = "weight_sync", True

    def __init__(self, mode: str):
        self.name = mode
        self.basis = f"analytical {mode} publication (bytes, buckets, per-instance terms; defaults assumed)"

    def build(self, art, cfg):
        if art is not None:
            return super().build(art, cfg)
        from simrl.cost.weight_sync import WEIGHT_SYNC_DEFAULTS, WeightSync

        knobs = knobs_of(cfg, "weight_sync")
        check_knobs("weight_sync", self.name, knobs, WEIGHT_SYNC_DEFAULTS[self.name])
        lora_rank = cfg.cost.training_knobs.get("lora_rank", 0)
        if self.name == "lora" and "rank" not in knobs and lora_rank:
            knobs["rank"] = lora_rank  # publish the adapter the trainer trains
        d = cfg.deployment  # the broadcast's link: receivers' GPU, same node or not
        return WeightSync(self.name, d.model, strict=cfg.cost.strict, gpu=d.rollout.gpu, placement=d.placement,
                          trainer_gpus=d.training.gpus, rollout_gpus=d.rollout.gpus, **knobs)


def families() -> tuple[FamilyBase, ...]:
    from simrl.cost.weight_sync import WEIGHT_SYNC_DEFAULTS

    return (FittedSyncFamily(), *(WeightSyncModeFamily(m) for m in WEIGHT_SYNC_DEFAULTS))
