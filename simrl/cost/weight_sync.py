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
  cache reset, resume) is 0.02 s: verl measures 0.12 s for a whole 7B sync at 4:4 on one node, bytes
  and per-call costs included. A bucket costs one engine ``load_weights`` call plus one broadcast's
  latency (`bucket_latency_s`) unless the knob is given.
  ``load_granularity=tensor`` (verl fully_async / one_step_off without the checkpoint engine:
  ``base_detach_sync.py`` broadcasts and loads one Hugging Face tensor at a time): ``overhead_s +
  max(host, link) + n_instances * per_instance_s`` with host = tensors x one ``load_weights`` call
  (vLLM rebuilds ``dict(named_parameters())`` and the MoE expert mapping per call: ``host_s_per_engine_param``
  per engine parameter tensor, calibrated on verl's 7B row) and link = tensors x the NCCL ring latency
  (NCCL's tuning model: base + a step per rank, network steps at node boundaries) + bytes / bandwidth.
  docs/catalog.md ("Weight sync") has the sources and the check on verl's 30B / 235B MoE syncs.
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
GRANULARITIES = ("bucket", "tensor")
_CHOICE_KNOBS = ("link", "load_granularity")

WEIGHT_SYNC_DEFAULTS: dict[str, dict[str, Any]] = {
    "nccl": {
        "bandwidth_bytes_per_s": None,  # None: the link's datasheet bandwidth x comm_efficiency
        "link": "auto",  # auto | nvlink | ib
        "comm_efficiency": 0.8,  # achieved / peak of a large pipelined NCCL broadcast
        "bucket_bytes": 512 * MiB,  # slime / verl default bucket
        "bucket_latency_s": None,  # None: one load_weights call + one broadcast's latency (derived)
        "overhead_s": 0.02,  # pause generation, barrier, prefix-cache reset, resume (module doc)
        "per_instance_s": 0.02,
        "dtype_bytes": 2.0,
        # Per-tensor publication (verl fully_async / one_step_off without the checkpoint engine):
        "load_granularity": "bucket",  # bucket | tensor: one broadcast + load_weights call per bucket or per tensor
        "host_s_per_engine_param": 1.2e-6,  # each load_weights call rebuilds dict(named_parameters())
        "host_s_per_expert_mapping": 0.125e-6,  # ... and the 3 x num_experts expert-parameter mapping
        "nccl_base_latency_s": 8.4e-6,  # NCCL tuning model (src/graph/tuning.cc): ring Simple base
        "nvlink_hop_latency_s": 3.4e-6,  # ... per ring step over NVLink
        "net_hop_latency_s": 14e-6,  # ... per ring step over the network
    },
    "checkpoint_engine": {
        "bandwidth_bytes_per_s": 70e9,
        "bucket_bytes": 2048 * MiB,
        "bucket_latency_s": 0.005,
        "overhead_s": 0.02,  # as nccl: pause, barrier, cache reset, resume
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
        if "load_granularity" in self.knobs and self.knobs["load_granularity"] not in GRANULARITIES:
            raise CostModelError(f"weight-sync knob 'load_granularity' must be one of {', '.join(GRANULARITIES)}, "
                                 f"got {self.knobs['load_granularity']!r}")
        for name, val in self.knobs.items():
            if val is REQUIRED and not (name in ("bandwidth_bytes_per_s", "bucket_latency_s")
                                        and mode == "nccl"):  # nccl: derived
                raise CostModelError(f"weight-sync mode {mode!r} needs the knob {name!r}")
            if isinstance(defaults[name], bool) or isinstance(val, bool):  # a flag is true/false, a figure never is
                if type(val) is not type(defaults[name]):
                    want = "true or false" if isinstance(defaults[name], bool) else "a finite number >= 0"
                    raise CostModelError(f"weight-sync knob {name!r} must be {want}, got {val!r}")
                continue
            if val is None or name in _CHOICE_KNOBS:
                continue
            if not isinstance(val, int | float) or not math.isfinite(val) or val < 0:
                raise CostModelError(f"weight-sync knob {name!r} must be a finite number >= 0, got {val!r}")
        if not 0 < self.knobs.get("comm_efficiency", 1.0) <= 1:
            raise CostModelError("weight-sync knob 'comm_efficiency' must be in (0, 1]")
        for name in ("bandwidth_bytes_per_s", "write_bytes_per_s", "read_bytes_per_s",
                     "aggregate_read_bytes_per_s", "bucket_bytes"):
            if name in self.knobs and self.knobs[name] is not None and self.knobs[name] <= 0:
                raise CostModelError(f"weight-sync knob {name!r} must be > 0")
        if self.knobs.get("bucket_bytes") is not None and self.knobs["bucket_bytes"] < 1:
            raise CostModelError("weight-sync knob 'bucket_bytes' must be >= 1 (bytes per bucket), got "
                                 f"{self.knobs['bucket_bytes']!r}")
        if "dtype_bytes" in self.knobs and not 0 < self.knobs["dtype_bytes"] <= 8:
            raise CostModelError("weight-sync knob 'dtype_bytes' must be in (0, 8] (bytes per parameter: 2 for "
                                 f"bf16, 4 for fp32), got {self.knobs['dtype_bytes']!r}")
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

    # -- per-tensor publication (load_granularity=tensor) --------------------------------------

    def ring(self) -> tuple[int, int]:
        """(ranks, nodes) of the NCCL group the trainer broadcasts over: every trainer and rollout
        GPU (verl's ``actor_rollout`` group), on their own nodes unless all fit one."""
        t, r = self.trainer_gpus or 1, self.rollout_gpus or 1
        gpn = self.gpu.gpus_per_node
        if self.placement == "colocated":
            return max(t, r), math.ceil(max(t, r) / gpn)
        if self.link() == "nvlink" and t + r <= gpn:
            return t + r, 1
        return t + r, max(2, math.ceil(t / gpn) + math.ceil(r / gpn))

    def broadcast_latency_s(self) -> float:
        """Fixed latency of one NCCL ring broadcast over `ring`: the base plus one step per rank,
        a network step for each node boundary the ring crosses and an NVLink step for the rest
        (NCCL's tuning model, ring / Simple protocol)."""
        k = self.knobs
        ranks, nodes = self.ring()
        net = nodes if nodes > 1 else 0
        return k["nccl_base_latency_s"] + net * k["net_hop_latency_s"] + (ranks - net) * k["nvlink_hop_latency_s"]

    def load_call_host_s(self) -> float:
        """Host seconds of one engine ``load_weights`` call: vLLM's model ``load_weights`` rebuilds
        ``dict(self.named_parameters())`` (and, for MoE, the ``3 x num_experts`` expert mapping) on
        every call, so a call costs in proportion to the engine's parameter tensors."""
        assert self.model is not None
        k = self.knobs
        mapping = 3 * self.model.num_experts if self.model.is_moe else 0
        return (engine_param_tensors(self.model) * k["host_s_per_engine_param"]
                + mapping * k["host_s_per_expert_mapping"])

    def bucket_latency_s(self) -> float:
        """Fixed cost of one bucket: the knob when set, else (nccl) one engine ``load_weights`` call
        for the bucket's tensors plus one broadcast's latency."""
        given = self.knobs.get("bucket_latency_s")
        if given is not None:
            return float(given)
        return self.load_call_host_s() + self.broadcast_latency_s()

    def per_tensor_parts(self) -> dict[str, float]:
        """Seconds of a per-tensor publication, by part: ``host`` (one ``load_weights`` call per
        tensor) and ``link`` (one broadcast per tensor: its latency, plus the bytes over the link).
        The broadcast is enqueued on a CUDA stream while the host goes on, so the two overlap and
        the slower bounds the publication."""
        assert self.model is not None
        n = hf_tensor_count(self.model)
        return {"tensors": float(n), "host": n * self.load_call_host_s(),
                "link": n * self.broadcast_latency_s() + self.payload_bytes() / self.bandwidth_bytes_per_s()}

    def publish_time(self, n_instances: int) -> float:
        self.domain.check("n_instances", n_instances)
        k = self.knobs
        size = self.payload_bytes()
        if self.mode == "fixed":
            t = k["publish_s"]
        elif self.mode == "nccl" and k["load_granularity"] == "tensor":
            p = self.per_tensor_parts()
            t = k["overhead_s"] + max(p["host"], p["link"]) + n_instances * k["per_instance_s"]
        elif self.mode in ("nccl", "checkpoint_engine"):
            buckets = math.ceil(size / k["bucket_bytes"])
            t = (k["overhead_s"] + buckets * self.bucket_latency_s() + size / self.bandwidth_bytes_per_s()
                 + n_instances * k["per_instance_s"])
        elif self.mode == "filesystem":
            read = max(size / k["read_bytes_per_s"], n_instances * size / k["aggregate_read_bytes_per_s"])
            t = k["overhead_s"] + size / k["write_bytes_per_s"] + read
        else:  # lora
            t = k["overhead_s"] + size / k["bandwidth_bytes_per_s"] + n_instances * k["per_instance_s"]
        return finite_nonneg(f"weight_sync[{self.mode}] publish_time", t)


# -- tensor counts ---------------------------------------------------------------------------------

def hf_tensor_count(m: ModelArch) -> int:
    """Tensors of the model in Hugging Face format (what a per-tensor publication sends one by one):
    per layer its attention projections (plus q/k/v biases, q/k norms, MLA latent norms), its MLP
    (a dense MLP's 2-3 matrices, or an MoE router, every routed expert's 2-3 matrices, the shared
    expert and its gate), two norms; plus the embedding, the final norm and an untied LM head.
    Qwen3-30B-A3B: 48 x (4 + 2 + 1 + 128 x 3 + 2) + 3 = 18,867."""
    mats = 3 if m.gated_mlp else 2
    attn = len(m.attention_matrices())
    if m.is_mla:
        attn += (1 if m.q_lora_rank else 0) + 1  # q_a_layernorm, kv_a_layernorm
    else:
        attn += (3 if m.attention_bias else 0) + (2 if m.qk_norm else 0)
    linear = 7  # Gated DeltaNet: in_proj_qkvz, in_proj_ba, conv1d, A_log, dt_bias, norm, out_proj
    moe = 0
    if m.is_moe:
        moe = 1 + m.num_experts * mats + (mats if m.shared_experts else 0)
        moe += 1 if m.shared_experts and m.shared_expert_gate else 0
    per_layers = (m.n_full_attention * attn + m.n_linear_attention * linear + m.n_dense_mlp_layers * mats
                  + m.n_moe_layers * moe + m.norms_per_layer * m.layers)
    return per_layers + 2 + (0 if m.tied_embeddings else 1)


def engine_param_tensors(m: ModelArch) -> int:
    """Parameter tensors of the inference engine's module tree (vLLM's fused layout): per layer a
    fused qkv projection (and its bias), o_proj, q/k norms; a fused gate_up and down (dense MLP) or a
    router plus the fused w13 / w2 expert tensors (and the shared expert's gate_up, down, gate);
    two norms; plus embedding, final norm and an untied LM head. What ``named_parameters()``
    walks on every ``load_weights`` call. Qwen3-30B-A3B: 48 x 9 + 3 = 435; Qwen2.5-7B: 28 x 7 + 3 = 199."""
    if m.is_mla:
        # q_proj + kv_a_proj_with_mqa (fused into fused_qkv_a_proj + q_a_layernorm + q_b_proj with a
        # q LoRA), kv_a_layernorm, kv_b_proj, o_proj
        attn = 5 + (1 if m.q_lora_rank else 0)
    else:
        attn = 2 + (1 if m.attention_bias else 0) + (2 if m.qk_norm else 0)
    linear = 6  # Gated DeltaNet: in_proj (fused), conv1d, A_log, dt_bias, norm, out_proj
    moe = 0
    if m.is_moe:
        moe = 3 + (2 if m.shared_experts else 0) + (1 if m.shared_experts and m.shared_expert_gate else 0)
    per_layers = (m.n_full_attention * attn + m.n_linear_attention * linear + m.n_dense_mlp_layers * 2
                  + m.n_moe_layers * moe + m.norms_per_layer * m.layers)
    return per_layers + 2 + (0 if m.tied_embeddings else 1)
