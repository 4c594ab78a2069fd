"""Weight-publication cost: seconds from the end of a training step until rollout uses new weights.

Five modes, each a closed form over the bytes to move (BF16 weights, or the LoRA adapter):

- ``nccl``: the trainer broadcasts the weights over an NCCL group to every rollout GPU, tensor by
  tensor or in buckets, and each engine loads them (verl / SkyRL / OpenRLHF style).
  ``overhead_s + ceil(bytes / bucket_bytes) * bucket_latency_s + bytes / bandwidth_bytes_per_s
  + n_instances * per_instance_s``. A pipelined broadcast's bandwidth does not fall with more
  receivers; each receiver adds a little setup/latency (``per_instance_s``).
- ``checkpoint_engine``: MoonshotAI's checkpoint-engine: the same broadcast with large, pipelined
  buckets (H2D copy, broadcast and reload overlapped), so a higher effective bandwidth and a small
  per-bucket cost. Same formula, other defaults (its README reports ~70 GB/s effective: Qwen3-235B
  BF16 on 8xH800 in under 7 s).
- ``filesystem``: the trainer writes a checkpoint, every instance reads and reloads it:
  ``overhead_s + bytes / write_bytes_per_s + max(bytes / read_bytes_per_s,
  n_instances * bytes / aggregate_read_bytes_per_s)`` (readers share the file system).
- ``lora``: only the adapter moves: ``rank * (in + out)`` parameters per adapted matrix, at
  ``dtype_bytes`` each, written and hot-loaded (vLLM ``load_lora_adapter``):
  ``overhead_s + bytes / bandwidth_bytes_per_s + n_instances * per_instance_s``.
- ``fixed``: ``publish_s`` seconds, whatever the model (a measured value or a what-if).
"""

from __future__ import annotations

import math
from typing import Any

from simrl.cost.architectures import ModelArch, model_arch
from simrl.cost.base import CostModelError, ValidityDomain, finite_nonneg
from simrl.cost.hardware import MiB

REQUIRED = None  # a knob the user must set

WEIGHT_SYNC_DEFAULTS: dict[str, dict[str, Any]] = {
    "nccl": {
        "bandwidth_bytes_per_s": 20e9,  # effective: broadcast + engine load_weights
        "bucket_bytes": 512 * MiB,
        "bucket_latency_s": 0.05,  # gather/pack, launch, per-bucket load_weights call
        "overhead_s": 0.5,  # pause generation, barrier, prefix-cache reset
        "per_instance_s": 0.02,
        "dtype_bytes": 2.0,
    },
    "checkpoint_engine": {
        "bandwidth_bytes_per_s": 70e9,
        "bucket_bytes": 2048 * MiB,
        "bucket_latency_s": 0.005,
        "overhead_s": 0.3,
        "per_instance_s": 0.01,
        "dtype_bytes": 2.0,
    },
    "filesystem": {
        "write_bytes_per_s": 2e9,  # safetensors save to local NVMe / shared FS
        "read_bytes_per_s": 4e9,  # one instance reading (page cache helps)
        "aggregate_read_bytes_per_s": 20e9,  # what the file system gives all readers together
        "overhead_s": 2.0,  # engine reload_weights, cache reset
        "dtype_bytes": 2.0,
    },
    "lora": {
        "rank": 32,
        "include_experts": False,
        "bandwidth_bytes_per_s": 5e9,  # save + load of a small file (page cache)
        "overhead_s": 0.05,  # load_lora_adapter bookkeeping
        "per_instance_s": 0.01,
        "dtype_bytes": 2.0,
    },
    "fixed": {"publish_s": REQUIRED},
}


def weight_sync_modes() -> list[str]:
    return sorted(WEIGHT_SYNC_DEFAULTS)


class WeightSync:
    """`WeightSyncCost` for one of `WEIGHT_SYNC_DEFAULTS`' modes; knobs override the mode defaults."""

    def __init__(self, mode: str, model: str | ModelArch | None = None, strict: bool = False, **knobs: Any):
        if mode not in WEIGHT_SYNC_DEFAULTS:
            raise CostModelError(f"unknown weight-sync mode {mode!r}; expected one of: {', '.join(weight_sync_modes())}")
        defaults = WEIGHT_SYNC_DEFAULTS[mode]
        unknown = sorted(set(knobs) - set(defaults))
        if unknown:
            raise CostModelError(
                f"weight-sync mode {mode!r} has no knob {unknown[0]!r}; valid knobs: {', '.join(sorted(defaults))}"
            )
        self.mode = mode
        self.knobs: dict[str, Any] = {**defaults, **knobs}
        for name, val in self.knobs.items():
            if val is REQUIRED:
                raise CostModelError(f"weight-sync mode {mode!r} needs the knob {name!r}")
            if isinstance(val, bool):
                continue
            if not isinstance(val, int | float) or not math.isfinite(val) or val < 0:
                raise CostModelError(f"weight-sync knob {name!r} must be a finite number >= 0, got {val!r}")
        for name in ("bandwidth_bytes_per_s", "write_bytes_per_s", "read_bytes_per_s",
                     "aggregate_read_bytes_per_s", "bucket_bytes"):
            if name in self.knobs and self.knobs[name] <= 0:
                raise CostModelError(f"weight-sync knob {name!r} must be > 0")
        if mode != "fixed" and model is None:
            raise CostModelError(f"weight-sync mode {mode!r} needs the model")
        self.model = model_arch(model) if model is not None else None
        self.domain = ValidityDomain(model=f"weight_sync[{mode}]", ranges={"n_instances": (0, 4096)}, strict=strict)

    def payload_bytes(self) -> float:
        """Bytes published per update: all weights, or the LoRA adapter."""
        k = self.knobs
        if self.mode == "fixed":
            return 0.0
        assert self.model is not None
        if self.mode == "lora":
            return self.model.lora_params(int(k["rank"]), bool(k["include_experts"])) * k["dtype_bytes"]
        return self.model.weight_bytes(k["dtype_bytes"])

    def publish_time(self, n_instances: int) -> float:
        self.domain.check("n_instances", n_instances)
        k = self.knobs
        size = self.payload_bytes()
        if self.mode == "fixed":
            t = k["publish_s"]
        elif self.mode in ("nccl", "checkpoint_engine"):
            buckets = math.ceil(size / k["bucket_bytes"])
            t = (k["overhead_s"] + buckets * k["bucket_latency_s"] + size / k["bandwidth_bytes_per_s"]
                 + n_instances * k["per_instance_s"])
        elif self.mode == "filesystem":
            read = max(size / k["read_bytes_per_s"], n_instances * size / k["aggregate_read_bytes_per_s"])
            t = k["overhead_s"] + size / k["write_bytes_per_s"] + read
        else:  # lora
            t = k["overhead_s"] + size / k["bandwidth_bytes_per_s"] + n_instances * k["per_instance_s"]
        return finite_nonneg(f"weight_sync[{self.mode}] publish_time", t)
