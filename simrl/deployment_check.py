"""Cross-field checks of a deployment against its model and hardware, before anything runs.

Per-field checks live on the config classes; these need the model's shape, so they run after
structuring (`simrl.config.load_config`). Each names the key to change. The rules are the ones
the real engines enforce at start-up (checked against the sources, see docs/cli.md):

- vLLM (vllm/config, ``ModelConfig.verify_with_parallel_config``; ``QKVParallelLinear``):
  ``num_attention_heads % tensor_parallel_size == 0``; KV heads are split when
  ``kv_heads >= tp`` (then ``kv_heads % tp == 0``) and replicated otherwise
  (then ``tp % kv_heads == 0``); pipeline stages need at least one layer each; expert
  parallelism needs an MoE model and no more EP ranks than experts.
- Megatron-core (``TransformerConfig.__post_init__``): ``num_attention_heads % tp == 0``,
  ``num_query_groups % tp == 0``, ``num_moe_experts % expert_model_parallel_size == 0``,
  ``pipeline_model_parallel_size <= num_layers``.
- Colocated placement (verl's hybrid engine): rollout instances live on the training GPUs,
  so they may not use more GPUs than training has, and must be the same GPU type.

Memory (weights, optimizer, KV) is checked by the cost models when they are built
(``does not fit ... raise tp/pp``), where the memory accounting lives.
"""

from __future__ import annotations

import os
from typing import Any

from simrl.cost.architectures import ModelArch, model_arch, model_names
from simrl.cost.base import CostModelError
from simrl.cost.hardware import gpu_names, gpu_spec
from simrl.strictio import did_you_mean

# The configuration is typed `Any` here: simrl.config calls this module, so importing its
# SimConfig (even under TYPE_CHECKING) would draw an import circle.
SimConfig = Any


def _heads(arch: ModelArch, tp: int, key: str, engine: str, replicate_kv: bool) -> list[str]:
    errs = []
    if arch.heads % tp:
        errs.append(f"{key}: tp={tp} does not divide the {arch.heads} attention heads of {arch.name} "
                    f"({engine} requires num_attention_heads % tp == 0); use a divisor of {arch.heads}")
    kv = arch.kv_heads
    if replicate_kv:
        ok = kv % tp == 0 if kv >= tp else tp % kv == 0
        rule = "kv_heads % tp == 0, or tp % kv_heads == 0 when KV heads are replicated"
    else:
        ok = kv % tp == 0
        rule = "num_query_groups % tp == 0"
    if not ok:
        errs.append(f"{key}: tp={tp} does not fit the {kv} KV heads of {arch.name} ({engine} requires {rule})")
    if arch.n_linear_attention and arch.linear_value_heads % tp:
        errs.append(f"{key}: tp={tp} does not divide the {arch.linear_value_heads} linear-attention value heads "
                    f"of {arch.name}")
    return errs


def _weights_fit(arch: ModelArch, cfg: SimConfig) -> list[str]:
    """A lower bound only: the bf16 weights spread over every GPU of one replica must fit.

    The exact accounting (KV, activations, optimizer state, reserves) is the cost models'; this
    catches the impossible before anything is built, whatever cost family is configured.
    """
    r, t = cfg.deployment.rollout, cfg.deployment.training
    errs = []
    weights = arch.weight_bytes(2)
    try:
        rg, tg = gpu_spec(r.gpu), gpu_spec(t.gpu)
    except CostModelError:
        return []
    per_gpu = weights / r.gpus_per_instance
    budget = rg.hbm_bytes * r.gpu_memory_utilization
    if per_gpu > budget:
        errs.append(f"deployment.rollout.tp: {arch.name} has {weights / 2**30:.1f} GiB of bf16 weights; even spread "
                    f"over tp*pp*dp={r.gpus_per_instance} GPU(s) that is {per_gpu / 2**30:.1f} GiB each, more than "
                    f"{budget / 2**30:.1f} GiB ({r.gpu} x gpu_memory_utilization={r.gpu_memory_utilization}); "
                    f"raise tp or pp")
    if weights / t.gpus > tg.hbm_bytes:
        errs.append(f"deployment.training.gpus: {arch.name} has {weights / 2**30:.1f} GiB of bf16 weights, more than "
                    f"{t.gpus} x {t.gpu} ({tg.hbm_bytes * t.gpus / 2**30:.1f} GiB) hold even fully sharded; "
                    f"raise deployment.training.gpus")
    return errs


def _is_file_ref(name: Any) -> bool:
    """A model or GPU given as a file path (config.json, a folder holding one, a GPU YAML file)."""
    text = str(name)
    return text.endswith((".json", ".yaml", ".yml")) or os.path.sep in text and os.path.exists(text)


def deployment_errors(cfg: SimConfig) -> list[str]:
    """Every cross-field problem of ``cfg.deployment``, as ``key.path: message`` lines."""
    dep = cfg.deployment
    r, t = dep.rollout, dep.training
    errs: list[str] = []
    try:
        arch = model_arch(dep.model)
    except CostModelError as exc:
        if _is_file_ref(dep.model):  # a config.json given by path: say what is wrong in it
            return [f"deployment.model: {exc}"]
        return [f"deployment.model: unknown model {dep.model!r}{did_you_mean(dep.model, model_names())}; "
                f"known: {', '.join(model_names())}"]
    for key, name in (("deployment.rollout.gpu", r.gpu), ("deployment.training.gpu", t.gpu)):
        try:
            gpu_spec(name)
        except CostModelError as exc:
            if not isinstance(name, str) or _is_file_ref(name):  # figures or a file: say what is wrong in them
                errs.append(f"{key}: {exc}")
                continue
            errs.append(f"{key}: unknown GPU {name!r}{did_you_mean(name, gpu_names())}; known: {', '.join(gpu_names())}")
    errs += _heads(arch, r.tp, "deployment.rollout.tp", "vLLM", replicate_kv=True)
    errs += _heads(arch, t.tp, "deployment.training.tp", "Megatron", replicate_kv=False)
    for key, pp in (("deployment.rollout.pp", r.pp), ("deployment.training.pp", t.pp)):
        if pp > arch.layers:
            errs.append(f"{key}: pp={pp} exceeds the {arch.layers} layers of {arch.name} (a stage needs a layer)")
    for key, ep, divisible in (("deployment.rollout.ep", r.ep, False), ("deployment.training.ep", t.ep, True)):
        if ep == 1:
            continue
        if not arch.is_moe:
            errs.append(f"{key}: ep={ep} needs an MoE model; {arch.name} is dense (set ep=1)")
        elif ep > arch.num_experts:
            errs.append(f"{key}: ep={ep} exceeds the {arch.num_experts} experts of {arch.name}")
        elif divisible and arch.num_experts % ep:
            errs.append(f"{key}: ep={ep} does not divide the {arch.num_experts} experts of {arch.name} "
                        f"(Megatron requires num_moe_experts % expert_model_parallel_size == 0)")
    if r.ep > 1 and (r.tp * r.dp) % r.ep:
        errs.append(f"deployment.rollout.ep: ep={r.ep} must divide tp*dp={r.tp * r.dp} (experts are spread "
                    f"over the TP x DP ranks)")
    errs += _weights_fit(arch, cfg)
    if dep.placement == "colocated":
        if r.gpus > t.gpus:
            errs.append(f"deployment.rollout.instances: colocated rollout uses {r.instances} x {r.gpus_per_instance} "
                        f"= {r.gpus} GPUs, more than the {t.gpus} training GPUs it shares; lower instances or "
                        f"tp*pp*dp, or raise deployment.training.gpus")
        if r.gpu != t.gpu:
            errs.append(f"deployment.rollout.gpu: colocated rollout runs on the training GPUs ({t.gpu}), "
                        f"got {r.gpu}; set both to the same GPU")
    return errs


def check_deployment(cfg: SimConfig, error_cls: type[Exception] = ValueError) -> None:
    errs = deployment_errors(cfg)
    if errs:
        raise error_cls("impossible deployment:\n  " + "\n  ".join(errs))
