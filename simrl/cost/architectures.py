"""Model architectures (from each model's Hugging Face config.json) and what follows from them.

A frozen `ModelArch` holds the shape numbers; parameter counts, KV bytes per token, the fixed
recurrent state of linear-attention layers, forward FLOPs per token and weight bytes are derived
from them, never typed in. Covered: dense, GQA, MoE (routed + shared experts, dense layers), MLA
(DeepSeek's compressed latent KV), sliding-window attention, and hybrid models (full attention on
some layers, Gated DeltaNet linear attention on the rest).

The model table is data: the ``config.json`` copies under ``simrl/cost/catalog/models/`` (file name
``<org>--<name>.json``). `model_arch(name)` resolves a Hugging Face repo id or a short alias of a
bundled one, or the path of any ``config.json`` (or of a directory holding one); `arch_from_hf_config`
turns a parsed config into a `ModelArch`. A new model is a new file, not a code change.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from simrl.cost.base import CostModelError
from simrl.cost.catalog import data_path


@attrs.frozen
class ModelArch:
    """Shape of a decoder-only transformer. Counts are per model; dims are elements."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width (dense layers only)
    vocab: int
    tied_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU (3 matrices) vs GELU MLP (2 matrices)
    qk_norm: bool = False
    attn_output_gate: bool = False  # q_proj also emits a sigmoid gate (Qwen3-Next / Qwen3.5)
    # MoE
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    shared_expert_intermediate: int = 0
    dense_layers: int = 0  # leading layers with a dense MLP in an MoE model
    # Hybrid attention: None means every layer has full (softmax) attention.
    full_attention_layers: int | None = None
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 4
    max_position: int = 131072
    attention_bias: bool = False  # q/k/v projections carry a bias (Qwen2)
    # MLA (DeepSeek-V2/V3): head_dim is the q/k head dim (nope + rope), v_head_dim the value head dim;
    # the cache holds one latent of kv_lora_rank + qk_rope_head_dim per token and layer.
    q_lora_rank: int = 0  # 0: q_proj is a full matrix
    kv_lora_rank: int = 0  # > 0 marks an MLA model
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0  # 0: same as head_dim
    # Sliding-window attention: that many of the full-attention layers only attend to (and keep) the
    # last ``sliding_window`` tokens.
    sliding_window: int | None = None
    sliding_window_layers: int = 0
    shared_expert_gate: bool = True  # a sigmoid gate scales the shared expert (Qwen); DeepSeek has none
    mtp_layers: int = 0  # multi-token-prediction modules shipped with the weights (not counted here)
    # RMSNorms per decoder layer: 2 (input, post-attention); Gemma 2/3 "sandwich" layers have 4
    # (input, post-attention, pre-feedforward, post-feedforward).
    norms_per_layer: int = 2

    # -- layer counts -------------------------------------------------------------------------

    @functools.cached_property
    def n_full_attention(self) -> int:
        return self.layers if self.full_attention_layers is None else self.full_attention_layers

    @functools.cached_property
    def n_linear_attention(self) -> int:
        return self.layers - self.n_full_attention

    @functools.cached_property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @functools.cached_property
    def value_head_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @functools.cached_property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @functools.cached_property
    def n_moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @functools.cached_property
    def n_dense_mlp_layers(self) -> int:
        return self.layers - self.n_moe_layers

    # -- per-layer parameter blocks ------------------------------------------------------------

    def attention_matrices(self) -> list[tuple[int, int]]:
        """(in, out) of each projection of one full-attention layer."""
        q_out = self.heads * self.head_dim * (2 if self.attn_output_gate else 1)
        o_in = self.heads * self.value_head_dim
        if self.is_mla:
            nope = self.head_dim - self.qk_rope_head_dim
            q = ([(self.hidden, self.q_lora_rank), (self.q_lora_rank, q_out)] if self.q_lora_rank
                 else [(self.hidden, q_out)])
            kv = [(self.hidden, self.kv_lora_rank + self.qk_rope_head_dim),
                  (self.kv_lora_rank, self.heads * (nope + self.value_head_dim))]
            return [*q, *kv, (o_in, self.hidden)]
        return [(self.hidden, q_out), (self.hidden, self.kv_heads * self.head_dim),
                (self.hidden, self.kv_heads * self.value_head_dim), (o_in, self.hidden)]

    @functools.cached_property
    def _linear_key_dim(self) -> int:
        return self.linear_key_heads * self.linear_key_head_dim

    @functools.cached_property
    def _linear_value_dim(self) -> int:
        return self.linear_value_heads * self.linear_value_head_dim

    def linear_attention_matrices(self) -> list[tuple[int, int]]:
        """(in, out) of the projections of one Gated DeltaNet layer (qkvz, ba, out)."""
        qkvz = 2 * self._linear_key_dim + 2 * self._linear_value_dim
        return [(self.hidden, qkvz), (self.hidden, 2 * self.linear_value_heads),
                (self._linear_value_dim, self.hidden)]

    def mlp_matrices(self, width: int) -> list[tuple[int, int]]:
        up = [(self.hidden, width)] * (2 if self.gated_mlp else 1)
        return [*up, (width, self.hidden)]

    @staticmethod
    def _count(mats: list[tuple[int, int]]) -> int:
        return sum(i * o for i, o in mats)

    @functools.cached_property
    def attention_params(self) -> int:
        """Parameters of one full-attention block (projections, biases, q/k and MLA latent norms)."""
        extra = 2 * self.head_dim if self.qk_norm else 0
        if self.attention_bias:
            extra += self.heads * self.head_dim + self.kv_heads * (self.head_dim + self.value_head_dim)
        if self.is_mla:
            extra += self.q_lora_rank + self.kv_lora_rank
        return self._count(self.attention_matrices()) + extra

    @functools.cached_property
    def linear_attention_params(self) -> int:
        """Parameters of one Gated DeltaNet block (projections, causal conv, decay, norm)."""
        if self.n_linear_attention == 0:
            return 0
        conv_dim = 2 * self._linear_key_dim + self._linear_value_dim
        extra = conv_dim * self.linear_conv_kernel + 2 * self.linear_value_heads + self.linear_value_head_dim
        return self._count(self.linear_attention_matrices()) + extra

    @functools.cached_property
    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return self._count(self.mlp_matrices(self.moe_intermediate)) if self.is_moe else 0

    @functools.cached_property
    def moe_block_dense_params(self) -> int:
        """Per MoE layer, the parameters every token uses: router, shared experts and their gate."""
        if not self.is_moe:
            return 0
        shared = self.shared_experts * self._count(self.mlp_matrices(self.shared_expert_intermediate))
        gate = self.hidden if self.shared_experts and self.shared_expert_gate else 0
        return self.hidden * self.num_experts + shared + gate

    @functools.cached_property
    def dense_mlp_params(self) -> int:
        return self._count(self.mlp_matrices(self.intermediate))

    @functools.cached_property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @functools.cached_property
    def lm_head_params(self) -> int:
        """Parameters stored for the output projection (0 when tied to the embedding)."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    # -- totals --------------------------------------------------------------------------------

    @functools.cached_property
    def routed_expert_params(self) -> int:
        """All routed-expert parameters of the model (the part EP shards)."""
        return self.n_moe_layers * self.num_experts * self.expert_params

    @functools.cached_property
    def non_expert_params(self) -> int:
        """Everything except routed experts: attention, dense MLPs, router, shared experts, norms,
        embeddings."""
        return (
            self.n_full_attention * self.attention_params
            + self.n_linear_attention * self.linear_attention_params
            + self.n_dense_mlp_layers * self.dense_mlp_params
            + self.n_moe_layers * self.moe_block_dense_params
            + (self.norms_per_layer * self.layers + 1) * self.hidden  # RMSNorms
            + self.embedding_params
            + self.lm_head_params
        )

    @functools.cached_property
    def total_params(self) -> int:
        return self.non_expert_params + self.routed_expert_params

    @functools.cached_property
    def active_params(self) -> int:
        """Parameters a token touches (routed experts counted experts_per_token times)."""
        return self.non_expert_params + self.n_moe_layers * self.experts_per_token * self.expert_params

    @functools.cached_property
    def matmul_active_params(self) -> int:
        """Active parameters that enter a matmul: no embedding lookup or norms, plus the LM head
        even when it is tied."""
        norms = (self.norms_per_layer * self.layers + 1) * self.hidden
        return self.active_params - self.embedding_params - norms - self.lm_head_params + self.vocab * self.hidden

    def weight_bytes(self, dtype_bytes: float = 2) -> float:
        return self.total_params * dtype_bytes

    # -- inference state -----------------------------------------------------------------------

    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements one token adds in one attention layer: K and V of every KV head, or the
        MLA latent (kv_lora_rank + rope dims, shared by all heads)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return self.kv_heads * (self.head_dim + self.value_head_dim)

    def kv_bytes_per_token(self, dtype_bytes: float = 2) -> float:
        """KV-cache bytes one token adds over every full-attention layer (sliding-window layers
        counted as full: the bound a cache without window eviction pays; see `kv_bytes_per_seq`)."""
        return self.n_full_attention * self.kv_elements_per_token_per_layer() * dtype_bytes

    def kv_bytes_per_seq(self, context: int, dtype_bytes: float = 2) -> float:
        """KV-cache bytes one sequence of ``context`` tokens holds: full layers keep every token,
        sliding-window layers at most the window."""
        per_layer = self.kv_elements_per_token_per_layer() * dtype_bytes
        swa = self.sliding_window_layers if self.sliding_window else 0
        window = min(context, self.sliding_window) if self.sliding_window else context
        return ((self.n_full_attention - swa) * context + swa * window) * per_layer

    def decode_attention_dims(self) -> tuple[int, int]:
        """(score dim, value dim) per head and cached token of a decode step. MLA decodes in the
        absorbed form (vLLM/FlashMLA): scores over the latent + rope, values in the latent."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim, self.kv_lora_rank
        return self.head_dim, self.value_head_dim

    def linear_state_bytes_per_seq(self, dtype_bytes: float = 2) -> float:
        """Fixed recurrent state of one sequence over all linear-attention layers: the DeltaNet
        matrix state (value heads x key dim x value dim) plus the causal-conv window."""
        if self.n_linear_attention == 0:
            return 0.0
        ssm = self.linear_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        conv = (2 * self._linear_key_dim + self._linear_value_dim) * (self.linear_conv_kernel - 1)
        return self.n_linear_attention * (ssm + conv) * dtype_bytes

    def attention_flops_per_token(self, context: float) -> float:
        """Forward FLOPs of the attention mixing for one token that attends to ``context`` tokens
        (QK^T and PV over full-attention layers, plus the fixed-cost DeltaNet update)."""
        full = 2.0 * self.n_full_attention * self.heads * (self.head_dim + self.value_head_dim) * context
        # DeltaNet per token and head: decay + rank-1 update + readout, about 8 dk*dv FLOPs.
        linear = 8.0 * self.n_linear_attention * self.linear_value_heads * (
            self.linear_key_head_dim * self.linear_value_head_dim
        )
        return full + linear

    def flops_per_token(self, context: float = 0.0) -> float:
        """Forward FLOPs for one token: 2 per active matmul parameter plus attention."""
        return 2.0 * self.matmul_active_params + self.attention_flops_per_token(context)

    def lora_params(self, rank: int, include_experts: bool = False) -> int:
        """LoRA adapter parameters when every linear projection gets A (in x r) and B (r x out)."""
        per = lambda mats: sum(rank * (i + o) for i, o in mats)  # noqa: E731
        total = self.n_full_attention * per(self.attention_matrices())
        total += self.n_linear_attention * per(self.linear_attention_matrices())
        total += self.n_dense_mlp_layers * per(self.mlp_matrices(self.intermediate))
        if self.is_moe:
            shared = per(self.mlp_matrices(self.shared_expert_intermediate)) * self.shared_experts
            routed = per(self.mlp_matrices(self.moe_intermediate)) * self.num_experts if include_experts else 0
            total += self.n_moe_layers * (shared + routed)
        return total


# -- Hugging Face config.json -> ModelArch ---------------------------------------------------------

MODELS_DIR = "models"
ALIASES_FILE = "aliases.yaml"

# model_type values whose config.json layout this reader knows (others are read as a plain
# Llama-style decoder when they carry the standard keys).
KNOWN_MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5",
    "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5_text", "deepseek_v2", "deepseek_v3", "phi", "phi3",
    "gemma", "gemma2", "gemma3", "gemma3_text", "olmo2", "granite", "gpt_oss",
)
# Keys a family's transformers config class fills in when config.json omits them (the Gemma 3
# multimodal files list only what differs from these in ``text_config``). Checked against
# huggingface/transformers@008e574391258935f3ecc3035c882e73bbcac419
# src/transformers/models/gemma2/configuration_gemma2.py (Gemma2Config) and
# @d903f323453edf4511f3eb8a5fe21e992a75d774 src/transformers/models/gemma3/modular_gemma3.py
# (Gemma3TextConfig.__init__).
_CONFIG_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma2": {
        "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 8192,
        "tie_word_embeddings": True, "sliding_window": 4096,
    },
    "gemma3_text": {
        "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
        "tie_word_embeddings": True, "sliding_window": 4096,
    },
}
_GEMMA_SANDWICH = ("gemma2", "gemma3_text")

_UNSUPPORTED = ("mamba", "mamba2", "rwkv", "jamba", "falcon_h1", "whisper", "t5", "bert")


def _req(cfg: Mapping[str, Any], key: str, where: str) -> int:
    if key not in cfg or cfg[key] is None:
        raise CostModelError(f"{where}: missing required key {key!r}")
    val = cfg[key]
    if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
        raise CostModelError(f"{where}.{key}: expected a positive integer, got {val!r}")
    return val


def _opt(cfg: Mapping[str, Any], key: str, where: str, default: int = 0) -> int:
    val = cfg.get(key)
    if val is None:
        return default
    if not isinstance(val, int) or isinstance(val, bool) or val < 0:
        raise CostModelError(f"{where}.{key}: expected an integer >= 0, got {val!r}")
    return val


def arch_from_hf_config(cfg: Mapping[str, Any], name: str, where: str | None = None) -> ModelArch:
    """Build a `ModelArch` from a parsed Hugging Face ``config.json``.

    Reads the standard keys (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``num_key_value_heads``, ``head_dim``, ``intermediate_size``, ``vocab_size``,
    ``tie_word_embeddings``, ``max_position_embeddings``), MoE keys (``num_experts`` /
    ``n_routed_experts`` / ``num_local_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
    ``n_shared_experts`` / ``shared_expert_intermediate_size``, ``first_k_dense_replace``,
    ``moe_layer_freq``, ``decoder_sparse_step``, ``mlp_only_layers``), MLA keys (``kv_lora_rank``,
    ``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``), sliding windows
    (``sliding_window`` with ``use_sliding_window`` / ``max_window_layers`` or ``layer_types``) and
    hybrid linear attention (``layer_types`` / ``full_attention_interval``, ``linear_*``). A
    multimodal wrapper's ``text_config`` is read in its place. Errors name ``where`` and the key.
    """
    where = where or name
    if not isinstance(cfg, Mapping):
        raise CostModelError(f"{where}: expected a JSON object (a Hugging Face config.json)")
    top_tied = cfg.get("tie_word_embeddings")
    top_type = str(cfg.get("model_type", ""))
    if isinstance(cfg.get("text_config"), Mapping):
        cfg = cfg["text_config"]
        where = f"{where}.text_config"
        if top_type == "gemma3" and "model_type" not in cfg:  # Gemma3Config's text sub-config class
            cfg = {**cfg, "model_type": "gemma3_text"}
    mtype = str(cfg.get("model_type", ""))
    if mtype == "gemma3":  # a wrapper without text_config: the text config class's defaults apply
        mtype = "gemma3_text"
    if mtype in _CONFIG_CLASS_DEFAULTS:
        defaults = dict(_CONFIG_CLASS_DEFAULTS[mtype])
        if top_tied is not None:  # the wrapper's own setting beats the sub-config class default
            defaults.pop("tie_word_embeddings")
        cfg = {**defaults, **cfg}
    if mtype in _UNSUPPORTED:
        raise CostModelError(f"{where}.model_type: {mtype!r} is not a decoder-only transformer SimRL can price")
    hidden = _req(cfg, "hidden_size", where)
    layers = _req(cfg, "num_hidden_layers", where)
    heads = _req(cfg, "num_attention_heads", where)
    vocab = _req(cfg, "vocab_size", where)
    kv_heads = _opt(cfg, "num_key_value_heads", where, heads) or heads
    if heads % kv_heads:
        raise CostModelError(f"{where}.num_key_value_heads: {kv_heads} does not divide num_attention_heads={heads} "
                             f"(each KV head serves a whole group of query heads)")
    head_dim = _opt(cfg, "head_dim", where, 0) or hidden // heads
    kw: dict[str, Any] = {}
    # MLA
    if _opt(cfg, "kv_lora_rank", where):
        nope = _req(cfg, "qk_nope_head_dim", where)
        rope = _req(cfg, "qk_rope_head_dim", where)
        head_dim = nope + rope
        kw.update(kv_lora_rank=cfg["kv_lora_rank"], q_lora_rank=_opt(cfg, "q_lora_rank", where),
                  qk_rope_head_dim=rope, v_head_dim=_req(cfg, "v_head_dim", where))
    # MoE
    experts = next((_opt(cfg, k, where) for k in ("num_experts", "n_routed_experts", "num_local_experts")
                    if cfg.get(k)), 0)
    dense_count = 0
    if experts:
        top_k = _req(cfg, "num_experts_per_tok", where)
        if top_k > experts:
            raise CostModelError(f"{where}.num_experts_per_tok: {top_k} exceeds the {experts} experts")
        moe_inter = _opt(cfg, "moe_intermediate_size", where) or _req(cfg, "intermediate_size", where)
        is_moe = _moe_layer_pattern(cfg, layers, where)
        dense_count = layers - sum(is_moe)
        shared_inter = _opt(cfg, "shared_expert_intermediate_size", where)
        n_shared = _opt(cfg, "n_shared_experts", where)
        if shared_inter and not n_shared:  # Qwen2-MoE / Qwen3-Next: one gated shared expert
            kw.update(shared_experts=1, shared_expert_intermediate=shared_inter)
        elif n_shared:  # DeepSeek: n_shared experts of the routed width, ungated
            kw.update(shared_experts=n_shared, shared_expert_intermediate=moe_inter, shared_expert_gate=False)
        kw.update(num_experts=experts, experts_per_token=top_k, moe_intermediate=moe_inter,
                  dense_layers=dense_count)
    intermediate = _opt(cfg, "intermediate_size", where) if (experts and not dense_count) else _req(
        cfg, "intermediate_size", where)
    # Layer types: hybrid linear attention and sliding windows.
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers:
            raise CostModelError(f"{where}.layer_types: expected a list of {layers} layer kinds")
        bad = sorted({t for t in layer_types if t not in ("full_attention", "linear_attention", "sliding_attention")})
        if bad:
            raise CostModelError(f"{where}.layer_types: unknown layer kind {bad[0]!r}")
    elif cfg.get("full_attention_interval"):
        every = _opt(cfg, "full_attention_interval", where)
        layer_types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)]
    window = cfg.get("sliding_window")
    if layer_types is not None:
        n_lin = layer_types.count("linear_attention")
        n_swa = layer_types.count("sliding_attention")
    else:
        n_lin = 0
        n_swa = _default_swa_layers(cfg, mtype, layers, where) if window else 0
    if n_swa:
        if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            raise CostModelError(f"{where}.sliding_window: expected a positive integer, got {window!r}")
        kw.update(sliding_window=window, sliding_window_layers=n_swa)
    if n_lin:
        kw.update(full_attention_layers=layers - n_lin,
                  linear_key_heads=_req(cfg, "linear_num_key_heads", where),
                  linear_value_heads=_req(cfg, "linear_num_value_heads", where),
                  linear_key_head_dim=_req(cfg, "linear_key_head_dim", where),
                  linear_value_head_dim=_req(cfg, "linear_value_head_dim", where),
                  linear_conv_kernel=_opt(cfg, "linear_conv_kernel_dim", where, 4))
    tied = cfg.get("tie_word_embeddings", top_tied if top_tied is not None else False)
    hybrid_qwen = mtype.startswith(("qwen3_next", "qwen3_5"))
    act = str(cfg.get("hidden_act", "silu"))
    return ModelArch(
        name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=intermediate, vocab=vocab, tied_embeddings=bool(tied),
        gated_mlp=not (mtype == "phi" or act.startswith("gelu") and mtype not in ("gemma", "gemma2", "gemma3_text")),
        qk_norm=mtype.startswith(("qwen3", "olmo2", "gemma3")) or bool(cfg.get("qk_layernorm")),
        attn_output_gate=bool(cfg.get("attn_output_gate", hybrid_qwen)),
        attention_bias=bool(cfg.get("attention_bias", mtype in ("qwen2", "qwen2_moe"))),
        max_position=_opt(cfg, "max_position_embeddings", where, 131072),
        mtp_layers=_opt(cfg, "num_nextn_predict_layers", where),
        norms_per_layer=4 if mtype in _GEMMA_SANDWICH else 2,
        **kw,
    )


def _moe_layer_pattern(cfg: Mapping[str, Any], layers: int, where: str) -> list[bool]:
    """Which layers have a routed-expert MLP (DeepSeek, Qwen-MoE and Mixtral conventions)."""
    first_dense = _opt(cfg, "first_k_dense_replace", where)
    freq = _opt(cfg, "moe_layer_freq", where, 1) or 1
    step = _opt(cfg, "decoder_sparse_step", where, 1) or 1
    mlp_only = cfg.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or not all(isinstance(i, int) for i in mlp_only):
        raise CostModelError(f"{where}.mlp_only_layers: expected a list of layer indices")
    out = []
    for i in range(layers):
        moe = i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in mlp_only
        out.append(moe)
    return out


def _default_swa_layers(cfg: Mapping[str, Any], mtype: str, layers: int, where: str) -> int:
    """Sliding-window layers when the config has no ``layer_types`` (transformers' conventions)."""
    if mtype.startswith("qwen"):
        # Qwen2/3: only with use_sliding_window, on layers >= max_window_layers.
        if not cfg.get("use_sliding_window", False):
            return 0
        return max(0, layers - _opt(cfg, "max_window_layers", where, layers))
    if mtype in ("mistral", "mixtral", "phi3"):
        return layers
    # transformers derives ``layer_types`` when config.json has none: layer i slides unless
    # (i + 1) % pattern == 0. Gemma2Config.__post_init__ uses pattern 2 (layers 0, 2, 4, ... slide;
    # 1, 3, 5, ... are global); Gemma3TextConfig.__init__ uses the config's ``sliding_window_pattern``
    # (default 6: layers 5, 11, 17, ... are global, 5 local : 1 global). (Commits as in
    # _CONFIG_CLASS_DEFAULTS.)
    if mtype == "gemma2":
        pattern = 2
    elif mtype == "gemma3_text":
        key = "sliding_window_pattern" if "sliding_window_pattern" in cfg else "_sliding_window_pattern"
        pattern = _opt(cfg, key, where, 6)
        if pattern == 0:
            raise CostModelError(f"{where}.{key}: expected a positive integer, got 0")
    else:
        return 0
    return layers - layers // pattern


def load_hf_config(path: str | Path, name: str | None = None) -> ModelArch:
    """Read a ``config.json`` (or a directory holding one) into a `ModelArch`."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    from workloads.strictio import load_json_file

    def fail(line: int, field: str | None, message: str) -> CostModelError:
        at = f"{p}:{line}" if line else str(p)
        return CostModelError(f"{at}: {field + ': ' if field else ''}{message} (a Hugging Face config.json)")

    # strict: duplicate keys, NaN / Infinity, non-UTF-8 and NUL bytes are errors naming the line
    cfg = load_json_file(p, fail)
    if not isinstance(cfg, dict):
        raise CostModelError(f"{p}: expected a JSON object (a Hugging Face config.json), got {type(cfg).__name__}")
    if name is None:
        name = str(cfg.get("_name_or_path") or (p.parent.name if p.name == "config.json" else p.stem))
    return arch_from_hf_config(cfg, name, where=str(p))


_SUFFIXES = ("-instruct", "-base", "-chat", "-hf")


def _normalize(name: str) -> str:
    key = name.strip().lower().rsplit("/", 1)[-1].replace("_", "-")
    key = key.removeprefix("meta-")
    for suffix in _SUFFIXES:
        key = key.removesuffix(suffix)
    return key.replace("llama3", "llama-3").replace("llama2", "llama-2")


@functools.cache
def _catalog() -> tuple[dict[str, ModelArch], dict[str, str]]:
    models: dict[str, ModelArch] = {}
    aliases: dict[str, str] = {}
    folder = data_path(MODELS_DIR)
    for f in sorted(folder.glob("*.json")):
        if "--" not in f.stem:
            raise CostModelError(f"{f.name}: bundled model files are named <org>--<name>.json")
        repo = f.stem.replace("--", "/", 1)
        models[repo] = load_hf_config(f, name=repo)
        key = _normalize(repo)
        if key in aliases:
            raise CostModelError(f"{f.name}: alias {key!r} already names {aliases[key]}")
        aliases[key] = repo
    _load_aliases(folder / ALIASES_FILE, models, aliases)
    return models, aliases


def _load_aliases(path: Path, models: dict[str, ModelArch], aliases: dict[str, str]) -> None:
    """Same-shape published models (``alias: bundled repo id``), validated against the bundle."""
    import yaml

    try:
        table = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError:
        return
    except yaml.YAMLError as exc:
        raise CostModelError(f"{path.name}: not valid YAML: {exc}") from None
    if not isinstance(table, dict):
        raise CostModelError(f"{path.name}: expected a mapping alias -> bundled repo id")
    for alias, target in table.items():
        if target not in models:
            raise CostModelError(f"{path.name}:{alias}: {target!r} is not a bundled model")
        key = _normalize(str(alias))
        if key in aliases and aliases[key] != target:
            raise CostModelError(f"{path.name}:{alias}: alias {key!r} already names {aliases[key]}")
        aliases[key] = target


def model_names() -> list[str]:
    return sorted(_catalog()[0])


def model_arch(name: str | ModelArch | Mapping[str, Any]) -> ModelArch:
    """A bundled model by Hugging Face id or alias ("qwen3-8b", "Qwen/Qwen3-8B"), the path of a
    ``config.json`` (or of a directory holding one), or a parsed config mapping."""
    if isinstance(name, ModelArch):
        return name
    if isinstance(name, Mapping):
        return arch_from_hf_config(name, str(name.get("_name_or_path") or "custom"), where="model")
    text = str(name)
    if text.endswith(".json") or Path(text).is_dir() and (Path(text) / "config.json").is_file():
        return load_hf_config(text)
    models, aliases = _catalog()
    canon = aliases.get(_normalize(text))
    if canon is None:
        raise CostModelError(
            f"unknown model {name!r}; known models: {', '.join(model_names())} "
            f"(short aliases: {', '.join(sorted(aliases))}); or give the path of a Hugging Face config.json"
        )
    return models[canon]




def model_slug(name: str | ModelArch) -> str:
    """A file-name-safe label for a model reference: ``Qwen/Qwen3-8B`` -> ``Qwen--Qwen3-8B``; a
    config.json path -> its folder's name (or the file's stem); for run directory names."""
    text = name.name if isinstance(name, ModelArch) else str(name)
    p = Path(text)
    if text.endswith(".json"):
        text = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    elif p.is_dir() and (p / "config.json").is_file():
        text = p.resolve().name
    text = text.replace("/", "--")
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in text).strip("-.") or "model"
