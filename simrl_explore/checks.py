"""Feasibility checks that drop a point before it is simulated, each with its reason.

- ``heads``: vLLM shards attention heads over TP ranks and refuses a TP size that does not
  divide the query heads ("Total number of attention heads (28) must be divisible by tensor
  parallel size (3)", vLLM ``ModelConfig.verify_with_parallel_config``); its QKV projection
  divides the KV heads over the ranks when ``tp <= kv_heads`` and replicates them when
  ``tp > kv_heads`` (``QKVParallelLinear``: ``divide(tp_size, total_num_kv_heads)``), so one
  of the two must divide the other. Megatron-Core needs ``num_attention_heads %
  tensor_model_parallel_size == 0`` and ``num_query_groups % tp == 0`` on the trainer.
- ``memory``: the rollout engine's weights must leave KV room on each GPU (the rollout cost
  model's own KV derivation raises when they do not), and the trainer's peak memory for the
  largest batch of the workload (`simrl.cost.analytical.AnalyticalTraining`'s memory model:
  weights, gradients, optimizer states by ZeRO stage, activations with or without
  checkpointing) must fit one GPU's HBM.
- ``kv``: an instance's KV capacity must hold the workload's longest call (prompt +
  completion); SimPy stops with an error when such a call is dispatched.

Checks that need costs build them once per layout (`LayoutCache`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from simrl.config import SimConfig, converter
from simrl.cost.base import CostModelError

GiB = 1024**3


def _layout_key(cfg: SimConfig, *sections: str) -> str:
    dep = cfg.deployment  # (the sections unstructured alone: what unstructure(cfg) holds for them)
    parts = {"model": dep.model, "cost": converter.unstructure(cfg.cost)}
    for s in sections:
        parts[s] = converter.unstructure(getattr(dep, s))
    return json.dumps(parts, sort_keys=True, default=str)


def _json(obj) -> str:
    return json.dumps(converter.unstructure(obj), sort_keys=True, default=str)


class LayoutCache:
    """Cost models and check verdicts, computed once per distinct layout."""

    def __init__(self):
        self.rollout: dict[Any, Any] = {}
        self.training_mem: dict[tuple, str | None] = {}
        # the key's parts by section object (a sweep's points share their deployment section, and a
        # point's costs are asked for by the checks and again by the lowering): id -> (object, json)
        self._parts: dict[int, tuple[Any, str]] = {}

    def _part(self, obj, make) -> str:
        hit = self._parts.get(id(obj))
        if hit is None or hit[0] is not obj:
            hit = self._parts[id(obj)] = (obj, make(obj))
        return hit[1]

    def layout_key(self, cfg: SimConfig) -> tuple[str, str]:
        """What the costs depend on: the model, the rollout and training sections and the cost
        section, as JSON (equal keys, equal costs)."""
        dep = self._part(cfg.deployment, lambda d: json.dumps(
            [d.model, converter.unstructure(d.rollout), converter.unstructure(d.training)], sort_keys=True,
            default=str))
        return dep, self._part(cfg.cost, _json)

    def costs(self, cfg: SimConfig):
        """The run's `Costs` (built by `simrl.cost.build.build_costs`), or the error building them."""
        key = self.layout_key(cfg)
        if key not in self.rollout:
            from simrl.cost.build import build_costs

            try:
                self.rollout[key] = build_costs(cfg)
            except CostModelError as exc:
                self.rollout[key] = exc
        return self.rollout[key]

    def rollout_cost(self, cfg: SimConfig):
        c = self.costs(cfg)
        return c if isinstance(c, CostModelError) else c.rollout


def check_heads(cfg: SimConfig) -> str | None:
    """The heads/experts/layers rules of `simrl.deployment_check` (vLLM and Megatron), one rule set:
    `load_config` already refuses such a point; this names the reason for a config built otherwise."""
    from simrl.deployment_check import deployment_errors

    errs = [e for e in deployment_errors(cfg) if ".tp:" in e or ".ep:" in e or ".pp:" in e]
    return f"heads: {errs[0]}" if errs else None


def _largest_batch(cfg: SimConfig, workload) -> list[int]:
    """Sequence lengths (prompt + completion) of the heaviest batch the policy can form."""
    per_traj = np.add.reduceat(workload.call_prompt_tokens + workload.call_completion_tokens,
                               workload.traj_call_start[:-1]) if workload.n_calls else np.zeros(0, np.int64)
    n = getattr(cfg.policy, "batch_groups", None) or 32
    size = max(1, int(n) * max(1, workload.group_size(0)))
    return [int(x) for x in np.sort(per_traj)[::-1][:size]]


def check_memory(cfg: SimConfig, workload, cache: LayoutCache) -> str | None:
    ro = cache.rollout_cost(cfg)
    if isinstance(ro, CostModelError):
        return f"memory: {ro}"
    key = (cfg.deployment.model, repr(cfg.deployment.training), getattr(cfg.policy, "batch_groups", None),
           workload.name, workload.n_groups, workload.seed)
    if key not in cache.training_mem:
        from simrl.cost.analytical import AnalyticalTraining

        t = cfg.deployment.training
        try:
            model = AnalyticalTraining(model=cfg.deployment.model, gpu=t.gpu, gpus=t.gpus, tp=t.tp, pp=t.pp, cp=t.cp,
                                       ep=t.ep, micro_batch_size=t.micro_batch_size,
                                       activation_checkpointing=t.activation_checkpointing, zero_stage=t.zero_stage)
            peak = model.peak_memory_bytes(_largest_batch(cfg, workload))
            cap = model.memory_capacity_bytes()
            verdict = None if peak <= cap else (
                f"memory: training peak {peak / GiB:.1f} GiB per GPU > {cap / GiB:.0f} GiB "
                f"({t.gpus} GPUs, tp={t.tp}, pp={t.pp}, zero={t.zero_stage})")
        except (CostModelError, ValueError) as exc:
            verdict = f"memory: training {exc}"
        cache.training_mem[key] = verdict
    return cache.training_mem[key]


def check_kv(cfg: SimConfig, workload, cache: LayoutCache) -> str | None:
    ro = cache.rollout_cost(cfg)
    if isinstance(ro, CostModelError):
        return None  # reported by the memory check
    cap = cfg.deployment.rollout.kv_capacity_tokens or int(ro.kv_capacity_tokens())
    need = int((workload.call_prompt_tokens + workload.call_completion_tokens).max()) if workload.n_calls else 0
    if need > cap:
        return f"kv: capacity {cap} tokens per instance < the longest call ({need} tokens)"
    return None


def run_checks(cfg: SimConfig, workload, checks: tuple[str, ...], cache: LayoutCache) -> str | None:
    for c in checks:
        why = (check_heads(cfg) if c == "heads" else check_memory(cfg, workload, cache) if c == "memory"
               else check_kv(cfg, workload, cache))
        if why:
            return why
    return None
