"""Weight-publication cost: seconds from the end of a training step until rollout uses new weights.

Five modes, each a closed form over the bytes to move (BF16 weights, or the LoRA adapter):

- ``nccl``: the trainer broadcasts the weights over an NCCL group to every rollout GPU, in buckets,
  and each engine loads them (vLLM's NCCLWeightTransferEngine; verl / SkyRL / OpenRLHF / TRL style).
  ``overhead_s + ceil(bytes / bucket_bytes) * bucket_latency_s + bytes / bandwidth_bytes_per_s
  + n_instances * per_instance_s``. A pipelined broadcast's bandwidth does not fall with more
  receivers; each receiver adds a little setup/latency (``per_instance_s``). Unless
  ``bandwidth_bytes_per_s`` is given, it is the link the broadcast crosses times
  ``comm_efficiency``: NVLink when trainer and rollout GPUs share one node (or are the same GPUs,
  colocated), else the per-GPU scale-out NIC (``link``: auto, nvlink or ib; the GPU from the
  catalog). Every rollout GPU receives the whole model (the engine keeps its TP shard), so the
  receiving NIC bounds the broadcast whatever the number of senders. ``overhead_s`` (pause, barrier,
  cache reset, resume) is bounded by measured end-to-end syncs of sub-1B models: TRL reports
  ~0.15-0.18 s for Qwen2-0.5B / Qwen3-0.6B on one node (huggingface/trl PRs #5249, #5892).
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
from simrl.cost.hardware import GPUSpec, MiB, gpu_spec

REQUIRED = None  # a knob the user must set
LINKS = ("auto", "nvlink", "ib")

WEIGHT_SYNC_DEFAULTS: dict[str, dict[str, Any]] = {
    "nccl": {
        "bandwidth_bytes_per_s": None,  # None: the link's datasheet bandwidth x comm_efficiency
        "link": "auto",  # auto | nvlink | ib
        "comm_efficiency": 0.8,  # achieved / peak of a large pipelined NCCL broadcast
        "bucket_bytes": 512 * MiB,  # slime / verl default bucket
        "bucket_latency_s": 0.005,  # pack, launch, per-bucket load_weights call
        "overhead_s": 0.15,  # pause generation, barrier, prefix-cache reset, resume
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

    def __init__(self, mode: str, model: str | ModelArch | None = None, strict: bool = False, *,
                 gpu: str | GPUSpec | dict | None = None, placement: str = "disaggregated",
                 trainer_gpus: int | None = None, rollout_gpus: int | None = None, **knobs: Any):
        """``gpu``, ``placement`` and the GPU counts locate the broadcast's link (nccl); without
        them the GPU is an H100 and trainer and rollout are taken to be on different nodes."""
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
        if placement not in ("disaggregated", "colocated"):
            raise CostModelError(f"weight-sync placement must be 'disaggregated' or 'colocated', got {placement!r}")
        self.gpu = gpu_spec(gpu if gpu is not None else "H100")
        self.placement = placement
        self.trainer_gpus, self.rollout_gpus = trainer_gpus, rollout_gpus
        if "link" in self.knobs and self.knobs["link"] not in LINKS:
            raise CostModelError(f"weight-sync knob 'link' must be one of {', '.join(LINKS)}, got {self.knobs['link']!r}")
        for name, val in self.knobs.items():
            if val is REQUIRED and not (name == "bandwidth_bytes_per_s" and mode == "nccl"):  # nccl: derived
                raise CostModelError(f"weight-sync mode {mode!r} needs the knob {name!r}")
            if isinstance(val, bool) or val is None or name == "link":
                continue
            if not isinstance(val, int | float) or not math.isfinite(val) or val < 0:
                raise CostModelError(f"weight-sync knob {name!r} must be a finite number >= 0, got {val!r}")
        if not 0 < self.knobs.get("comm_efficiency", 1.0) <= 1:
            raise CostModelError("weight-sync knob 'comm_efficiency' must be in (0, 1]")
        for name in ("bandwidth_bytes_per_s", "write_bytes_per_s", "read_bytes_per_s",
                     "aggregate_read_bytes_per_s", "bucket_bytes"):
            if name in self.knobs and self.knobs[name] is not None and self.knobs[name] <= 0:
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

    def link(self) -> str:
        """The link an nccl broadcast crosses: 'nvlink' inside one node, 'ib' across nodes."""
        chosen = self.knobs.get("link", "auto")
        if chosen != "auto":
            return chosen
        if self.placement == "colocated":
            return "nvlink"
        if self.trainer_gpus is not None and self.rollout_gpus is not None:
            if self.trainer_gpus + self.rollout_gpus <= self.gpu.gpus_per_node:
                return "nvlink"
        return "ib"

    def bandwidth_bytes_per_s(self) -> float:
        """Effective broadcast bandwidth: the knob when set, else link peak x comm_efficiency."""
        k = self.knobs
        if k.get("bandwidth_bytes_per_s") is not None:
            return float(k["bandwidth_bytes_per_s"])
        peak = self.gpu.nvlink_bytes_per_s if self.link() == "nvlink" else self.gpu.ib_bytes_per_s
        return peak * k.get("comm_efficiency", 1.0)

    def publish_time(self, n_instances: int) -> float:
        self.domain.check("n_instances", n_instances)
        k = self.knobs
        size = self.payload_bytes()
        if self.mode == "fixed":
            t = k["publish_s"]
        elif self.mode in ("nccl", "checkpoint_engine"):
            buckets = math.ceil(size / k["bucket_bytes"])
            t = (k["overhead_s"] + buckets * k["bucket_latency_s"] + size / self.bandwidth_bytes_per_s()
                 + n_instances * k["per_instance_s"])
        elif self.mode == "filesystem":
            read = max(size / k["read_bytes_per_s"], n_instances * size / k["aggregate_read_bytes_per_s"])
            t = k["overhead_s"] + size / k["write_bytes_per_s"] + read
        else:  # lora
            t = k["overhead_s"] + size / k["bandwidth_bytes_per_s"] + n_instances * k["per_instance_s"]
        return finite_nonneg(f"weight_sync[{self.mode}] publish_time", t)
