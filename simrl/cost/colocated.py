"""Colocated (hybrid-engine) placement: what switching the GPUs between rollout and training costs.

When rollout and training share GPUs (verl's hybrid engine, NeMo-RL colocated generation, TRL /
slime colocated sync), every step switches each GPU from the inference engine to the trainer and
back. `ColocatedCost` prices each move as bytes over the link it crosses and returns them as named
phases, in the order they run. What each phase moves was read from the systems' source (docs/fidelity.md,
"Colocated placement as the systems pay it", lists the files and commits):

before training (rollout -> train)
- ``sleep``: vLLM ``Worker.sleep(level)``: ``CuMemAllocator.sleep`` copies every allocation tagged
  ``weights`` to a pinned host buffer (``cudaMemcpy``) at level 1 and unmaps the rest (the KV cache);
  level 2 offloads nothing (it keeps only the model's small named buffers, not priced). Level 1:
  engine weights per GPU / host link; level 2: 0.
- ``load_params`` / ``load_grads`` / ``load_optimizer``: the trainer's state comes back. Parameters
  and optimizer states are copied from host (verl ``load_fsdp_model_to_gpu`` /
  ``load_fsdp_optimizer``; Megatron-core ``_ParamAndGradBuffer.reload_from_cpu``, NeMo-RL
  ``prepare_for_training``): bytes per GPU / host link. Gradients are never copied: Megatron's
  ``offload_to_cpu`` frees the gradient buffer and ``reload_from_cpu`` re-allocates and zeroes it,
  so ``load_grads`` is one write of the buffer at HBM bandwidth (verl's FSDP frees gradients in
  ``zero_grad``; its cards leave ``grad_offload`` off).

after training (train -> rollout)
- ``offload_optimizer``: optimizer states to host (bytes / host link). Gradients are freed: nothing
  crosses the host link, so there is no gradient phase here.
- ``wake_weights``: ``wake_up(tags=["weights"])`` re-maps the weights and, at level 1, copies the
  old ones back from host (bytes / host link; they are overwritten by the refit next, but the systems
  pay the copy: verl's sharding manager and NeMo-RL's refit both wake the weights at level 1 before
  loading the new ones); level 2: 0.
- ``reshard`` (the refit): every trainer rank materialises each full parameter and hands it to the
  engine's ``load_weights``, which keeps its TP shard. ``refit=fsdp`` (verl's ``FSDPVLLMShardingManager``:
  ``param.full_tensor()`` per parameter): an all-gather over the FSDP shard group of the model in
  the trainer's storage dtype (``refit_dtype_bytes``, 4: verl's actor keeps fp32 parameters).
  ``refit=megatron`` (NeMo-RL's ``stream_weights_via_ipc_zmq`` through Megatron-Bridge's
  ``export_hf_weights``; verl's Megatron ``per_tensor_generator``): each TP shard is broadcast from
  its pipeline stage over the PP group, then all-gathered over TP (routed experts over EP), BF16.
  The gathers go over the collective link of the group (NVLink inside a node, the NIC across), then
  HBM traffic: the gathered tensors are written once, NeMo-RL's CUDA-IPC transport
  (``refit_transport=ipc``) packs them into a ping-pong buffer (read + write), and ``load_weights``
  reads the engine's shard and writes it into the engine (at ``refit_dtype_bytes`` in, BF16 out).
- ``offload_params``: the trainer's parameters to host (when ``param_offload``).
- ``param_offload_calls``: how many worker calls per step load the parameters from host and offload
  them back. verl's FSDP worker (volcengine/verl@1fc52bb5 ``verl/workers/fsdp_workers.py``) does it
  around each call when ``fsdp_config.param_offload``: the rollout sharding manager's ``__enter__``
  (``sharding_manager/fsdp_vllm.py``: ``load_fsdp_model_to_gpu``, the refit, ``offload_fsdp_model_to_cpu``),
  ``compute_log_prob`` (old log-probs) and ``update_actor``: 3 per step with the old-log-prob
  recompute, 2 without; the optimizer states only around ``update_actor`` (once). Default 1 (one
  round trip per step, Megatron / NeMo-RL's ``prepare_for_training`` / ``offload_after_refit``).
  ``load_params`` and ``offload_params`` are each that many copies of the shard.
- ``kv_rebuild``: ``wake_up(tags=["kv_cache"])`` maps the KV pool again (``cuMemCreate`` +
  ``cuMemMap`` at the same virtual addresses, so the captured CUDA graphs stay valid); nothing is
  written or copied: 0 s. Its content is gone: the engine's prefix cache starts empty (the sync
  rule's ``clear_prefix_cache``, priced by the engine as recomputed prefill). 0 also when
  ``free_cache_engine`` is off (the pool stays resident).

Their sum is the per-step overhead (`total_s`); the engine charges the first group before the
training step and the second before rollout resumes. Host copies are priced at the pinned rate
(vLLM's sleep buffers and Megatron's parameter copies are pinned; PyTorch's
``.to("cpu", non_blocking=True)`` pins too); NeMo-RL's and verl's optimizer ``.to("cpu")`` copies
are pageable, which this prices the same (optimistic; no datasheet figure for pageable copies).

Memory: while the engine is awake, the trainer keeps on each GPU whatever it does not offload; it
and vLLM's claim (``gpu_memory_utilization`` x HBM) must fit the GPU. While training, the sleeping
engine keeps its runtime reserve (CUDA graphs, NCCL buffers), plus its KV pool when
``free_cache_engine`` is off; `training_memory_left_bytes` is what the trainer gets. Both are
checked when the model is built, with an error naming the knob to change.

Knobs (``cost.colocated_knobs``; unknown knobs are errors): ``sleep_level`` (1 or 2, default 1:
vLLM's ``LLM.sleep`` default, and what verl's sharding manager and NeMo-RL's vLLM worker call),
``param_offload``, ``grad_offload``, ``optimizer_offload`` (default true: every trainer state off
the GPU while the engine runs; verl's own defaults are false), ``param_offload_calls`` (default 1;
verl's FSDP worker: 3 with the old-log-prob recompute, 2 without), ``free_cache_engine`` (true, verl's
default), ``refit`` (``fsdp`` or ``megatron``; default from the trainer: ZeRO-3 is FSDP),
``refit_transport`` (``direct``: the gathered tensors go straight to ``load_weights``, verl;
``ipc``: through a CUDA-IPC buffer, NeMo-RL), ``refit_dtype_bytes`` (bytes per parameter of the
trainer's stored parameters, what offload moves and the FSDP refit gathers; default 4 with
``refit=fsdp``, verl's actor ``model_dtype`` fp32, and 2 with ``megatron``, BF16),
``host_link_efficiency`` (0.8 of the catalog's one-way host link, pinned-memory copies),
``comm_efficiency`` (0.8, the refit gathers), ``hbm_efficiency`` (0.8, local copies).
``cost.offload_bytes_per_s``, when given, replaces the host-link bandwidth (catalog ``host_bw`` x
efficiency). None of these efficiencies is fitted to a published result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from attrs import validators as v

from simrl.cost.architectures import ModelArch, model_arch
from simrl.cost.base import CostModelError
from simrl.cost.hardware import GiB, GPUSpec, gpu_spec

if TYPE_CHECKING:
    from simrl.config import SimConfig

BEFORE = ("sleep", "load_params", "load_grads", "load_optimizer")
AFTER = ("offload_optimizer", "wake_weights", "reshard", "offload_params", "kv_rebuild")
PHASES = BEFORE + AFTER

ADAM_BYTES_PER_PARAM = 12  # fp32 master weights + two fp32 moments (as simrl.cost.analytical)
ADAM_MOMENT_BYTES = 8  # the two fp32 moments alone (FSDP: the fp32 parameters are the master copy)
REFITS = ("fsdp", "megatron")
TRANSPORTS = ("direct", "ipc")

_eff = v.and_(v.instance_of(float), v.gt(0.0), v.le(1.0))
_nonneg = v.ge(0.0)
_pos_int = v.and_(v.instance_of(int), v.ge(1))


@attrs.frozen
class ColocatedCost:
    """Per-step cost of sharing GPUs between the inference engine and the trainer (module doc).

    Byte figures are per GPU; every GPU moves its own share at once, so a phase takes its bytes
    over one GPU's link."""

    gpu: GPUSpec
    engine_weight_bytes: float  # the engine's weights on one rollout GPU (its TP x PP shard), BF16
    kv_pool_bytes: float  # the engine's KV pool on one GPU
    engine_reserve_bytes: float  # what a sleeping engine keeps (CUDA graphs, NCCL, runtime)
    gpu_memory_utilization: float  # vLLM's claim while awake, a fraction of HBM
    train_param_bytes: float  # the trainer's parameter shard on one GPU (stored dtype)
    train_grad_bytes: float
    train_optimizer_bytes: float
    train_static_bytes: float  # everything the trainer needs resident while it trains (no activations)
    # The refit: the model's parameters (dense part and routed experts) and the trainer's layout.
    dense_params: float = attrs.field(default=0.0, validator=_nonneg)
    expert_params: float = attrs.field(default=0.0, validator=_nonneg)
    refit: str = attrs.field(default="megatron", validator=v.in_(REFITS))
    refit_transport: str = attrs.field(default="direct", validator=v.in_(TRANSPORTS))
    refit_dtype_bytes: float = attrs.field(default=2.0, validator=v.gt(0.0))
    shard_group: int = attrs.field(default=1, validator=_pos_int)  # fsdp: ranks one parameter is sharded over
    train_tp: int = attrs.field(default=1, validator=_pos_int)
    train_pp: int = attrs.field(default=1, validator=_pos_int)
    train_ep: int = attrs.field(default=1, validator=_pos_int)
    train_gpus: int = attrs.field(default=1, validator=_pos_int)
    sleep_level: int = attrs.field(default=1, validator=v.in_((1, 2)))
    param_offload: bool = True
    grad_offload: bool = True
    optimizer_offload: bool = True
    free_cache_engine: bool = True
    host_link_efficiency: float = attrs.field(default=0.8, validator=_eff)
    comm_efficiency: float = attrs.field(default=0.8, validator=_eff)
    hbm_efficiency: float = attrs.field(default=0.8, validator=_eff)
    host_bytes_per_s: float | None = attrs.field(default=None, validator=v.optional(v.gt(0.0)))
    param_offload_calls: int = attrs.field(default=1, validator=_pos_int)  # module doc

    # -- bandwidths ----------------------------------------------------------------------------

    @property
    def host_bw(self) -> float:
        """Bytes/s one GPU moves to or from host memory."""
        if self.host_bytes_per_s is not None:
            return self.host_bytes_per_s
        return self.gpu.pcie_bytes_per_s * self.host_link_efficiency

    def _link(self, group: int, stride: int = 1) -> float:
        return self.gpu.collective_bytes_per_s(group, stride) * self.comm_efficiency

    @property
    def hbm_bw(self) -> float:
        return self.gpu.hbm_bytes_per_s * self.hbm_efficiency

    # -- the refit -----------------------------------------------------------------------------

    @property
    def model_bytes(self) -> float:
        """The whole model in the refit's dtype: what every trainer rank materialises."""
        return (self.dense_params + self.expert_params) * self.refit_dtype_bytes

    def gather_s(self) -> dict[str, float]:
        """Seconds of each gather that materialises the full parameters on one GPU (one entry per
        group: ``fsdp``; or ``pp``, ``tp``, ``ep``), each bytes received / the group's link."""
        d = self.refit_dtype_bytes
        if self.refit == "fsdp":
            g = self.shard_group
            return {"fsdp": self.model_bytes * (1 - 1 / g) / self._link(g) if g > 1 else 0.0}
        tp, pp, ep = self.train_tp, self.train_pp, self.train_ep
        out = {}
        # Megatron's rank order (tp, cp, ep, dp, pp): a PP group's ranks are gpus / pp apart.
        column = (self.dense_params / tp + self.expert_params / ep) * d  # one TP/EP rank's shard over all stages
        out["pp"] = column * (1 - 1 / pp) / self._link(pp, self.train_gpus // pp) if pp > 1 else 0.0
        out["tp"] = self.dense_params * d * (1 - 1 / tp) / self._link(tp) if tp > 1 else 0.0
        out["ep"] = self.expert_params * d * (1 - 1 / ep) / self._link(ep) if ep > 1 else 0.0
        return out

    def refit_hbm_bytes(self) -> float:
        """Local copies of the refit on one GPU: the gathered tensors written once, the IPC buffer
        packed (read + write) when ``refit_transport=ipc``, and ``load_weights`` reading the
        engine's shard (in the refit dtype) and writing it (BF16)."""
        shard_params = self.engine_weight_bytes / 2
        out = self.model_bytes + shard_params * (self.refit_dtype_bytes + 2)
        if self.refit_transport == "ipc":
            out += 2 * self.model_bytes
        return out

    def reshard_s(self) -> float:
        return sum(self.gather_s().values()) + self.refit_hbm_bytes() / self.hbm_bw

    def phases(self) -> dict[str, float]:
        """Seconds of each phase, in order (module doc); they sum to `total_s`."""
        host = self.host_bw
        level1 = self.sleep_level == 1
        return {
            "sleep": self.engine_weight_bytes / host if level1 else 0.0,
            "load_params": self.param_offload_calls * self.train_param_bytes / host if self.param_offload else 0.0,
            "load_grads": self.train_grad_bytes / self.hbm_bw if self.grad_offload else 0.0,
            "load_optimizer": self.train_optimizer_bytes / host if self.optimizer_offload else 0.0,
            "offload_optimizer": self.train_optimizer_bytes / host if self.optimizer_offload else 0.0,
            "wake_weights": self.engine_weight_bytes / host if level1 else 0.0,
            "reshard": self.reshard_s(),
            "offload_params": self.param_offload_calls * self.train_param_bytes / host if self.param_offload else 0.0,
            "kv_rebuild": 0.0,  # cuMemCreate + cuMemMap; nothing written (module doc)
        }

    def before_s(self) -> float:
        p = self.phases()
        return sum(p[k] for k in BEFORE)

    def after_s(self) -> float:
        p = self.phases()
        return sum(p[k] for k in AFTER)

    def total_s(self) -> float:
        return sum(self.phases().values())

    # -- memory --------------------------------------------------------------------------------

    def trainer_resident_bytes(self) -> float:
        """What the trainer keeps on each GPU while the engine is awake."""
        return ((0.0 if self.param_offload else self.train_param_bytes)
                + (0.0 if self.grad_offload else self.train_grad_bytes)
                + (0.0 if self.optimizer_offload else self.train_optimizer_bytes))

    def engine_asleep_bytes(self) -> float:
        return self.engine_reserve_bytes + (0.0 if self.free_cache_engine else self.kv_pool_bytes)

    def training_memory_left_bytes(self) -> float:
        """HBM the trainer gets while the engine sleeps."""
        return self.gpu.hbm_bytes - self.engine_asleep_bytes()

    def memory_errors(self) -> list[str]:
        errs = []
        claim = self.gpu_memory_utilization * self.gpu.hbm_bytes
        resident = self.trainer_resident_bytes()
        if resident + claim > self.gpu.hbm_bytes:
            errs.append(
                f"colocated on {self.gpu.name}: vLLM's gpu_memory_utilization={self.gpu_memory_utilization} claims "
                f"{claim / GiB:.1f} GiB while the trainer keeps {resident / GiB:.1f} GiB resident "
                f"(HBM {self.gpu.hbm_bytes / GiB:.1f} GiB); lower deployment.rollout.gpu_memory_utilization or set "
                f"cost.colocated_knobs.param_offload / grad_offload / optimizer_offload=true")
        left = self.training_memory_left_bytes()
        if self.train_static_bytes > left:
            errs.append(
                f"colocated on {self.gpu.name}: the trainer needs {self.train_static_bytes / GiB:.1f} GiB (weights, "
                f"gradients, optimizer, reserve) but the sleeping engine leaves {left / GiB:.1f} GiB; set "
                f"cost.colocated_knobs.free_cache_engine=true or lower the trainer's footprint")
        return errs




# -- building from a run's configuration -----------------------------------------------------------

KNOBS = ("sleep_level", "param_offload", "grad_offload", "optimizer_offload", "free_cache_engine", "refit",
         "refit_transport", "refit_dtype_bytes", "host_link_efficiency", "comm_efficiency", "hbm_efficiency",
         "param_offload_calls")
_BOOL_KNOBS = ("param_offload", "grad_offload", "optimizer_offload", "free_cache_engine")
_CHOICES = {"refit": REFITS, "refit_transport": TRANSPORTS}


def _check_knobs(knobs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, val in knobs.items():
        where = f"cost.colocated_knobs.{k}"
        if k not in KNOBS:
            raise CostModelError(f"{where}: unknown knob; expected some of: {', '.join(KNOBS)}")
        if k in _BOOL_KNOBS:
            if not isinstance(val, bool):
                raise CostModelError(f"{where}: expected true or false, got {val!r}")
        elif k in _CHOICES:
            if val not in _CHOICES[k]:
                raise CostModelError(f"{where}: expected one of {', '.join(_CHOICES[k])}, got {val!r}")
        elif k == "sleep_level":
            if val not in (1, 2) or isinstance(val, bool):
                raise CostModelError(f"{where}: expected 1 (offload weights) or 2 (discard weights), got {val!r}")
        elif k == "param_offload_calls":
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise CostModelError(f"{where}: expected a whole number of worker calls >= 1, got {val!r}")
        elif k == "refit_dtype_bytes":
            if val not in (1, 2, 4) or isinstance(val, bool):
                raise CostModelError(f"{where}: expected 1, 2 or 4 (bytes per stored parameter), got {val!r}")
            val = float(val)
        else:
            if isinstance(val, bool) or not isinstance(val, int | float) or not 0 < val <= 1:
                raise CostModelError(f"{where}: expected a fraction in (0, 1], got {val!r}")
            val = float(val)
        out[k] = val
    return out


def _trainer(arch: ModelArch, cfg: SimConfig, training: Any, knobs: dict[str, Any]) -> dict[str, Any]:
    """The trainer's side of `ColocatedCost`: its per-GPU state bytes and its layout for the refit."""
    from simrl.cost.analytical import AnalyticalTraining

    t = cfg.deployment.training
    if isinstance(training, AnalyticalTraining):
        tr = training
        refit = knobs.get("refit", "fsdp" if tr.zero_stage >= 3 else "megatron")
        dtype = knobs.get("refit_dtype_bytes", 4.0 if refit == "fsdp" else 2.0)
        n = tr._zero_group
        params = tr.params_per_gpu() * dtype / (n if tr.zero_stage >= 3 else 1)
        trainable = tr.trainable_params_per_gpu()
        grads = trainable * tr.grad_dtype_bytes / (n if tr.zero_stage >= 2 else 1)
        # FSDP in fp32: the parameters are the master copy, the optimizer holds the two moments.
        per = ADAM_MOMENT_BYTES if refit == "fsdp" and dtype == 4 else ADAM_BYTES_PER_PARAM
        optim = trainable * per / (n if tr.zero_stage >= 1 else 1)
        optim *= 1 - tr.offload().cpu_fraction  # Megatron's CPU optimizer keeps that part on host
        return dict(train_param_bytes=params, train_grad_bytes=grads, train_optimizer_bytes=optim,
                    train_static_bytes=tr._static_bytes(), refit=refit, refit_dtype_bytes=dtype, shard_group=n,
                    train_tp=tr.tp, train_pp=tr.pp, train_ep=tr.ep, train_gpus=tr.gpus)
    # A training model that does not expose its layout: BF16 weights and gradients and Adam's
    # 12 bytes, all sharded over the training GPUs (16 bytes per parameter), refit as FSDP.
    gpus = t.gpus
    per = arch.total_params / gpus
    refit = knobs.get("refit", "fsdp")
    return dict(train_param_bytes=2 * per, train_grad_bytes=2 * per, train_optimizer_bytes=ADAM_BYTES_PER_PARAM * per,
                train_static_bytes=16 * per, refit=refit, refit_dtype_bytes=knobs.get("refit_dtype_bytes", 2.0),
                shard_group=gpus, train_tp=t.tp, train_pp=t.pp, train_ep=t.ep,
                train_gpus=gpus)


def colocated_cost(cfg: SimConfig, rollout: Any = None, training: Any = None) -> ColocatedCost:
    """The `ColocatedCost` of a run: bytes from the built rollout and training models (or the
    architecture), bandwidths from the catalog GPU, knobs from ``cost.colocated_knobs``."""
    knobs = _check_knobs(dict(getattr(cfg.cost, "colocated_knobs", {}) or {}))
    arch = model_arch(cfg.deployment.model)
    r = cfg.deployment.rollout
    gpu = gpu_spec(cfg.deployment.training.gpu)
    engine = getattr(rollout, "weight_bytes_per_gpu", None)
    if engine is None:
        engine = arch.weight_bytes(2) / (r.tp * r.pp)
    kv_fn = getattr(rollout, "_kv_bytes_per_token_per_gpu", None)
    per_tok = kv_fn() if kv_fn is not None else arch.kv_bytes_per_token(2) / (r.tp * r.pp)
    kv_pool = rollout.kv_capacity_tokens() / r.dp * per_tok if rollout is not None else 0.0
    reserve = float(getattr(rollout, "nontorch_reserve_bytes", 1.5 * GiB))
    gmu = float(getattr(rollout, "gpu_memory_utilization", r.gpu_memory_utilization))
    trainer = _trainer(arch, cfg, training, knobs)
    rest = {k: val for k, val in knobs.items() if k not in trainer}
    return ColocatedCost(
        gpu=gpu, engine_weight_bytes=engine, kv_pool_bytes=kv_pool, engine_reserve_bytes=reserve,
        gpu_memory_utilization=gmu, dense_params=float(arch.non_expert_params),
        expert_params=float(arch.routed_expert_params), host_bytes_per_s=cfg.cost.offload_bytes_per_s,
        **trainer, **rest)
