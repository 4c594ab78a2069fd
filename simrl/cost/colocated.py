"""Colocated (hybrid-engine) placement: what switching the GPUs between rollout and training costs.

When rollout and training share GPUs (verl's hybrid engine, TRL / slime colocated sync), every step
switches each GPU from the inference engine to the trainer and back. `ColocatedCost` prices each
move as bytes over the link it crosses and returns them as named phases, in the order they run:

before training (rollout -> train)
- ``sleep``: vLLM sleep mode. Level 1 copies the engine's weights to host memory and discards the
  KV cache; level 2 discards both (vLLM v1 ``Worker.sleep``: ``offload_tags=("weights",)`` only at
  level 1; checked against vllm-project/vllm commit 0012cf691b7e, ``vllm/v1/worker/gpu_worker.py``).
  Level 1: engine weights per GPU / host link; level 2: 0.
- ``load_params`` / ``load_grads`` / ``load_optimizer``: the trainer's parameter, gradient-buffer
  and optimizer shards come back from host memory (verl's ``fsdp_config.param_offload`` /
  ``optimizer_offload``, Megatron's ``param_offload`` / ``grad_offload`` / ``optimizer_offload``),
  each bytes per GPU / host link when that knob is on, else 0.

after training (train -> rollout)
- ``offload_optimizer`` / ``offload_grads``: the same shards go back to host memory.
- ``wake_weights``: ``wake_up(tags=["weights"])``. Level 1 copies the old weights back from host
  (bytes / host link; they are overwritten next, which is why RL frameworks use level 2 when the
  weights change every step); level 2 only maps the memory: 0.
- ``reshard``: the sharding manager turns the training layout into the rollout layout: each
  rollout GPU all-gathers the part of its TP x PP shard it does not already hold (rollout shard
  minus the trainer's parameter shard on that GPU, bytes over the collective link of the group)
  and copies it into the engine's buffers (read + write at HBM bandwidth).
- ``offload_params``: the trainer's parameters go to host memory (when ``param_offload``).
- ``kv_rebuild``: ``wake_up(tags=["kv_cache"])`` maps the KV pool again; its content is gone, so
  it is priced as one write of the pool at HBM bandwidth (the prefix cache is lost; the engine
  recomputes what it needs). 0 when ``free_cache_engine`` is off (the KV pool stays resident).

Their sum is the per-step overhead (`total_s`); the engine charges the first group before the
training step and the second before rollout resumes.

Memory: while the engine is awake, the trainer keeps on each GPU whatever it does not offload; it
and vLLM's claim (``gpu_memory_utilization`` x HBM) must fit the GPU. While training, the sleeping
engine keeps its runtime reserve (CUDA graphs, NCCL buffers), plus its KV pool when
``free_cache_engine`` is off; `training_memory_left_bytes` is what the trainer gets. Both are
checked when the model is built, with an error naming the knob to change.

Knobs (``cost.colocated_knobs``; unknown knobs are errors): ``sleep_level`` (1 or 2, default 1:
vLLM's ``LLM.sleep`` default), ``param_offload``, ``grad_offload``, ``optimizer_offload`` (default
true: every trainer state goes to host, what SimRL charged before; verl's own defaults are false),
``free_cache_engine`` (true, verl's default), ``host_link_efficiency`` (0.8 of the catalog's
one-way host link, pinned-memory copies), ``comm_efficiency`` (0.8, the reshard all-gather),
``hbm_efficiency`` (0.8, local copies and the KV rebuild). ``cost.offload_bytes_per_s``, when
given, replaces the host-link bandwidth (catalog ``host_bw`` x efficiency).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs
from attrs import validators as v

from simrl.cost.architectures import ModelArch, model_arch
from simrl.cost.base import CostModelError
from simrl.cost.hardware import GiB, GPUSpec, gpu_spec

if TYPE_CHECKING:
    from simrl.config import SimConfig

BEFORE = ("sleep", "load_params", "load_grads", "load_optimizer")
AFTER = ("offload_optimizer", "offload_grads", "wake_weights", "reshard", "offload_params", "kv_rebuild")
PHASES = BEFORE + AFTER

ADAM_BYTES_PER_PARAM = 12  # fp32 master weights + two fp32 moments (as simrl.cost.analytical)

_eff = v.and_(v.instance_of(float), v.gt(0.0), v.le(1.0))
_nonneg = v.ge(0.0)


@attrs.frozen
class ColocatedCost:
    """Per-step cost of sharing GPUs between the inference engine and the trainer (module doc).

    Byte figures are per GPU; every GPU moves its own share at once, so a phase takes its bytes
    over one GPU's link."""

    gpu: GPUSpec
    engine_weight_bytes: float  # the engine's weights on one rollout GPU (its TP x PP shard)
    kv_pool_bytes: float  # the engine's KV pool on one GPU
    engine_reserve_bytes: float  # what a sleeping engine keeps (CUDA graphs, NCCL, runtime)
    gpu_memory_utilization: float  # vLLM's claim while awake, a fraction of HBM
    train_param_bytes: float  # the trainer's parameter shard on one GPU
    train_grad_bytes: float
    train_optimizer_bytes: float
    train_static_bytes: float  # everything the trainer needs resident while it trains (no activations)
    reshard_group: int = attrs.field(default=1, validator=v.ge(1))  # ranks one rollout shard is gathered from
    sleep_level: int = attrs.field(default=1, validator=v.in_((1, 2)))
    param_offload: bool = True
    grad_offload: bool = True
    optimizer_offload: bool = True
    free_cache_engine: bool = True
    host_link_efficiency: float = attrs.field(default=0.8, validator=_eff)
    comm_efficiency: float = attrs.field(default=0.8, validator=_eff)
    hbm_efficiency: float = attrs.field(default=0.8, validator=_eff)
    host_bytes_per_s: float | None = attrs.field(default=None, validator=v.optional(v.gt(0.0)))

    # -- bandwidths ----------------------------------------------------------------------------

    @property
    def host_bw(self) -> float:
        """Bytes/s one GPU moves to or from host memory."""
        if self.host_bytes_per_s is not None:
            return self.host_bytes_per_s
        return self.gpu.pcie_bytes_per_s * self.host_link_efficiency

    @property
    def reshard_bw(self) -> float:
        return self.gpu.collective_bytes_per_s(self.reshard_group) * self.comm_efficiency

    @property
    def hbm_bw(self) -> float:
        return self.gpu.hbm_bytes_per_s * self.hbm_efficiency

    # -- bytes ---------------------------------------------------------------------------------

    def reshard_bytes(self) -> float:
        """What one rollout GPU receives: its rollout shard less the trainer's shard it holds."""
        return max(0.0, self.engine_weight_bytes - self.train_param_bytes)

    def phases(self) -> dict[str, float]:
        """Seconds of each phase, in order (module doc); they sum to `total_s`."""
        host = self.host_bw
        level1 = self.sleep_level == 1
        out = {
            "sleep": self.engine_weight_bytes / host if level1 else 0.0,
            "load_params": self.train_param_bytes / host if self.param_offload else 0.0,
            "load_grads": self.train_grad_bytes / host if self.grad_offload else 0.0,
            "load_optimizer": self.train_optimizer_bytes / host if self.optimizer_offload else 0.0,
            "offload_optimizer": self.train_optimizer_bytes / host if self.optimizer_offload else 0.0,
            "offload_grads": self.train_grad_bytes / host if self.grad_offload else 0.0,
            "wake_weights": self.engine_weight_bytes / host if level1 else 0.0,
            "reshard": self.reshard_bytes() / self.reshard_bw + 2 * self.engine_weight_bytes / self.hbm_bw,
            "offload_params": self.train_param_bytes / host if self.param_offload else 0.0,
            "kv_rebuild": self.kv_pool_bytes / self.hbm_bw if self.free_cache_engine else 0.0,
        }
        return out

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

KNOBS = ("sleep_level", "param_offload", "grad_offload", "optimizer_offload", "free_cache_engine",
         "host_link_efficiency", "comm_efficiency", "hbm_efficiency")
_BOOL_KNOBS = ("param_offload", "grad_offload", "optimizer_offload", "free_cache_engine")


def _check_knobs(knobs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, val in knobs.items():
        where = f"cost.colocated_knobs.{k}"
        if k not in KNOBS:
            raise CostModelError(f"{where}: unknown knob; expected some of: {', '.join(KNOBS)}")
        if k in _BOOL_KNOBS:
            if not isinstance(val, bool):
                raise CostModelError(f"{where}: expected true or false, got {val!r}")
        elif k == "sleep_level":
            if val not in (1, 2) or isinstance(val, bool):
                raise CostModelError(f"{where}: expected 1 (offload weights) or 2 (discard weights), got {val!r}")
        else:
            if isinstance(val, bool) or not isinstance(val, int | float) or not 0 < val <= 1:
                raise CostModelError(f"{where}: expected a fraction in (0, 1], got {val!r}")
            val = float(val)
        out[k] = val
    return out


def _trainer_bytes(arch: ModelArch, cfg: SimConfig, training: Any) -> tuple[float, float, float, float]:
    """(parameter, gradient, optimizer, static) bytes of the trainer on one GPU."""
    from simrl.cost.analytical import AnalyticalTraining

    if isinstance(training, AnalyticalTraining):
        t = training
        n = t._zero_group
        params = t.params_per_gpu() * t.param_dtype_bytes / (n if t.zero_stage >= 3 else 1)
        trainable = t.trainable_params_per_gpu()
        grads = trainable * t.grad_dtype_bytes / (n if t.zero_stage >= 2 else 1)
        optim = trainable * ADAM_BYTES_PER_PARAM / (n if t.zero_stage >= 1 else 1)
        optim *= 1 - t.offload().cpu_fraction  # Megatron's CPU optimizer keeps that part on host
        return params, grads, optim, t._static_bytes()
    # A training model that does not expose its layout: BF16 weights and gradients and Adam's
    # 12 bytes, all sharded over the training GPUs (16 bytes per parameter, as before).
    per = arch.total_params / cfg.deployment.training.gpus
    return 2 * per, 2 * per, ADAM_BYTES_PER_PARAM * per, 16 * per


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
    params, grads, optim, static = _trainer_bytes(arch, cfg, training)
    group = max(1, min(cfg.deployment.training.gpus, math.ceil(engine / params))) if params > 0 else 1
    return ColocatedCost(
        gpu=gpu, engine_weight_bytes=engine, kv_pool_bytes=kv_pool, engine_reserve_bytes=reserve,
        gpu_memory_utilization=gmu, train_param_bytes=params, train_grad_bytes=grads,
        train_optimizer_bytes=optim, train_static_bytes=static, reshard_group=group,
        host_bytes_per_s=cfg.cost.offload_bytes_per_s, **knobs)
