"""The `composed` rollout family: an iteration's time summed from a kernel database.

One continuous-batching iteration runs ``num_tokens = batch_size + prefill_tokens`` tokens
through every layer. Per layer it adds the kernel DB's time for each measured non-attention
operator (norms, QKV / output / MLP GEMMs, RoPE, activation, residual add), an attention term,
and two tensor-parallel all-reduces of ``num_tokens * hidden`` half-precision values; once per
iteration it adds the embedding lookup, the LM head GEMM over the sampled rows, the pipeline
send/recv between stages and a CPU overhead.

The Vidur data hold no attention-kernel timings, so attention is analytical and calibrated by
the kernel DB's fitted efficiencies: prefill FLOPs (causal, ``2 * heads * head_dim *
prefill_tokens**2`` per layer, the prefill treated as one chunk) at the fitted GEMM FLOP/s times
``attention_flops_fraction``; decode reads every resident KV byte at the fitted streaming
bandwidth times ``attention_bytes_fraction``. Both fractions are assumptions unless fitted
from ``iteration`` observations. Dense full-attention models only; others raise
`CostModelError`.
"""

from __future__ import annotations

import attrs
import numpy as np

from simrl.cost.architectures import ModelArch, model_arch
from simrl.cost.artifact import ArtifactError, check_coefficients, domain_of
from simrl.cost.base import CostModelError, ValidityDomain, finite_nonneg
from simrl.cost.family import FamilyBase, rollout_kv_tokens, rollout_name, value_range
from simrl.cost.hardware import GPUSpec, gpu_spec
from simrl.cost.kerneldb import (
    DTYPE_BYTES,
    CollectiveModel,
    KernelDB,
    LayerShape,
    fit_collectives,
    fit_kernel_db,
    gemm_work,
)

LAYER_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


def layer_shape(arch: ModelArch) -> LayerShape:
    """The kernel-DB shape of a dense model's layer; MoE and hybrid models are rejected."""
    if arch.is_moe or arch.n_linear_attention or arch.attn_output_gate:
        raise CostModelError(
            f"composed rollout model: {arch.name} is not a dense full-attention model "
            "(MoE / linear attention / gated attention have no kernel-DB operators yet)"
        )
    return LayerShape(n_embd=arch.hidden, n_head=arch.heads, n_kv_head=arch.kv_heads,
                      n_expanded_embd=arch.intermediate, vocab_size=arch.vocab,
                      use_gated_mlp=arch.gated_mlp, head_dim=arch.head_dim)


@attrs.define
class ComposedRollout:
    """Iteration time of one rollout instance composed from kernel-DB operator times."""

    db: KernelDB
    arch: ModelArch
    gpu: GPUSpec
    tp: int = 1
    pp: int = 1
    collectives: dict[str, CollectiveModel] = attrs.field(factory=dict)
    cpu_overhead_s: float = 0.0
    attention_flops_fraction: float = 0.75
    attention_bytes_fraction: float = 1.0
    kv_tokens: int = 0  # KV capacity of the instance (the loader derives it like the roofline)
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("rollout/composed"))
    shape: LayerShape = attrs.field(init=False)

    def __attrs_post_init__(self):
        self.shape = layer_shape(self.arch)
        if self.tp > 1 and f"all_reduce/{self.tp}" not in self.collectives:
            raise CostModelError(f"composed rollout model: no all_reduce measurements for tp={self.tp} "
                                 f"(have: {', '.join(sorted(self.collectives)) or 'none'})")
        if self.pp > 1 and "send_recv/2" not in self.collectives:
            raise CostModelError("composed rollout model: pp > 1 needs send_recv measurements")

    def attention_time(self, num_tokens: int, kv_tokens: int, prefill_tokens: int) -> float:
        """Seconds of attention for one layer on one TP rank (analytical, DB-calibrated)."""
        heads = self.shape.n_head / self.tp
        kv_heads = max(self.shape.n_kv_head / self.tp, 1.0)
        hd = self.shape.hd
        flops_per_s = self.db.flops_per_s() * self.attention_flops_fraction
        bytes_per_s = self.db.bytes_per_s() * self.attention_bytes_fraction
        prefill = 2.0 * heads * hd * prefill_tokens**2 / flops_per_s
        qkvo_bytes = DTYPE_BYTES * num_tokens * hd * (2 * heads + 2 * kv_heads)
        kv_bytes = DTYPE_BYTES * 2 * kv_heads * hd * kv_tokens
        decode = max(kv_bytes / bytes_per_s, 4.0 * heads * hd * kv_tokens / flops_per_s)
        return prefill + decode + qkvo_bytes / bytes_per_s

    def layer_time(self, num_tokens: int, kv_tokens: int, prefill_tokens: int) -> float:
        t = sum(self.db.predict(op, self.shape, num_tokens, self.tp) for op in LAYER_OPS
                if op in self.db.coefficients)
        if self.arch.qk_norm and "input_layernorm" in self.db.coefficients:
            qk_bytes = DTYPE_BYTES * 2 * num_tokens * (self.shape.n_head + self.shape.n_kv_head) * self.shape.hd
            t += float(self.db.coefficients["input_layernorm"].time_s(0.0, qk_bytes / self.tp))
        t += self.attention_time(num_tokens, kv_tokens, prefill_tokens)
        if self.tp > 1:
            t += 2 * self.collectives[f"all_reduce/{self.tp}"].predict(DTYPE_BYTES * num_tokens * self.shape.n_embd)
        return t

    def iteration_time(self, batch_size: int, kv_tokens: int, prefill_tokens: int) -> float:
        num_tokens = batch_size + prefill_tokens
        self.domain.check("num_tokens", num_tokens)
        self.domain.check("tp", self.tp)
        if num_tokens <= 0:
            return finite_nonneg("composed iteration_time", self.cpu_overhead_s)
        t = self.arch.layers * self.layer_time(num_tokens, kv_tokens, prefill_tokens)
        if "emb" in self.db.coefficients:
            t += self.db.predict("emb", self.shape, num_tokens, self.tp)
        sampled = batch_size + (1 if prefill_tokens else 0)
        fl, by = gemm_work(sampled, self.shape.n_embd, self.shape.vocab_size / self.tp)
        t += float(self.db.coefficients["mlp_down_proj"].time_s(fl, by))
        if self.pp > 1:
            t += (self.pp - 1) * self.collectives["send_recv/2"].predict(DTYPE_BYTES * num_tokens * self.shape.n_embd)
        return finite_nonneg("composed iteration_time", t + self.cpu_overhead_s)

    def kv_capacity_tokens(self) -> int:
        return self.kv_tokens


# What `KernelDB.from_dict` and `CollectiveModel.from_dict` read, checked when the artifact is
# read (a string or a zero bandwidth here was a TypeError or a division by zero mid-run).
_OP_SPEC = {"launch_s": "number", "flops_per_s": "positive", "bytes_per_s": "positive", "sharpness": "positive?"}
_TABLE_SPEC = {"op": "string", "shape": "string", "tp": "positive", "num_tokens": "numbers", "time_s": "numbers"}
_COLLECTIVE_SPEC = {"name": "string", "num_workers": "positive", "size_bytes": "numbers", "time_s": "numbers",
                    "latency_s": "number", "bytes_per_s": "positive", "topology": "string?"}


def _same_length(table: dict, where: str, at: str) -> None:
    xs = table.get("num_tokens", table.get("size_bytes"))
    if len(xs) != len(table["time_s"]):
        raise ArtifactError(f"{where}: {at}.time_s: {len(table['time_s'])} values for {len(xs)} sizes; "
                            f"expected one time per size")


class ComposedFamily(FamilyBase):
    """Fitted from ``operator`` and ``collective`` observations; predicts any dense model from its
    shape, so it has no layout keys (TP is in its validity domain)."""

    target, name, fittable = "rollout", "composed", True
    domain_dims = ("num_tokens", "tp")
    basis = "kernel-DB operator times summed per layer + analytical attention + TP/PP communication"
    coefficients = {"kernel_db": "object", "collectives": "object", "cpu_overhead_s": "number",
                    "attention_flops_fraction": "positive", "attention_bytes_fraction": "positive"}

    def check(self, coefficients, where):
        super().check(coefficients, where)
        kdb = coefficients["kernel_db"]
        check_coefficients(kdb, {"operators": "object", "tables": "list?"}, where, "coefficients.kernel_db")
        ops = kdb["operators"]
        if "mlp_down_proj" not in ops:
            raise ArtifactError(f"{where}: coefficients.kernel_db.operators.mlp_down_proj: missing (the LM head "
                                "is priced with it; fit on data that has the MLP GEMMs)")
        for op, c in ops.items():
            check_coefficients(c, _OP_SPEC, where, f"coefficients.kernel_db.operators.{op}")
        for i, t in enumerate(kdb.get("tables", [])):
            at = f"coefficients.kernel_db.tables[{i}]"
            check_coefficients(t, _TABLE_SPEC, where, at)
            _same_length(t, where, at)
        for name, c in coefficients["collectives"].items():
            at = f"coefficients.collectives.{name}"
            check_coefficients(c, _COLLECTIVE_SPEC, where, at)
            _same_length(c, where, at)

    def fit(self, obs, opts):
        tables = opts.get("with_tables", True)
        ops = [o for o in obs if o.kind == "operator"]
        db = fit_kernel_db(ops, with_tables=tables)
        coefs = {"kernel_db": db.to_dict(tables),
                 "collectives": {k: c.to_dict() for k, c in fit_collectives(obs).items()},
                 "cpu_overhead_s": float(opts.get("cpu_overhead_s", 0.0)),
                 "attention_flops_fraction": float(opts.get("attention_flops_fraction", 0.75)),
                 "attention_bytes_fraction": float(opts.get("attention_bytes_fraction", 1.0))}
        return coefs, {"num_tokens": value_range([o.inputs["num_tokens"] for o in ops]),
                       "tp": value_range([o.inputs["tp"] for o in ops])}

    def predict(self, art, obs, opts):
        coefs = art["coefficients"]
        db = KernelDB.from_dict(coefs["kernel_db"])
        colls = {k: CollectiveModel.from_dict(c) for k, c in coefs["collectives"].items()}
        f = db.predict_physics if opts.get("physics_only") else db.predict
        pred, act, grp = [], [], []
        for o in obs:
            if o.kind == "operator" and o.name in db.coefficients:
                pred.append(f(o.name, LayerShape.from_inputs(o.inputs), o.inputs["num_tokens"], int(o.inputs["tp"])))
            elif o.kind == "collective" and (c := colls.get(f"{o.name}/{int(o.inputs['num_workers'])}")) \
                    and c.matches(o):
                pred.append(c.predict(o.inputs["size_bytes"]))
            else:
                continue
            act.append(o.value)
            grp.append(o.name)
        return np.array(pred), np.array(act), grp

    def build(self, art, cfg) -> ComposedRollout:
        if art is None:
            return super().build(art, cfg)
        coefs, ro = art["coefficients"], cfg.deployment.rollout
        return ComposedRollout(
            db=KernelDB.from_dict(coefs["kernel_db"]), arch=model_arch(cfg.deployment.model), gpu=gpu_spec(ro.gpu),
            tp=ro.tp, pp=ro.pp, collectives={k: CollectiveModel.from_dict(c) for k, c in coefs["collectives"].items()},
            cpu_overhead_s=coefs["cpu_overhead_s"], attention_flops_fraction=coefs["attention_flops_fraction"],
            attention_bytes_fraction=coefs["attention_bytes_fraction"], kv_tokens=rollout_kv_tokens(art, cfg),
            domain=domain_of(art, rollout_name(self.name, cfg), cfg.cost.strict))


FAMILY = ComposedFamily()
