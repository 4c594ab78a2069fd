"""Model architectures (from each model's public Hugging Face config.json) and what follows from them.

A frozen `ModelArch` holds the shape numbers; parameter counts, KV bytes per token, the fixed
recurrent state of linear-attention layers, forward FLOPs per token and weight bytes are derived
from them, never typed in. Dense, MoE (routed + shared experts, leading dense layers) and hybrid
models (full attention on some layers, Gated DeltaNet linear attention on the rest) are covered.
`model_arch(name)` resolves a Hugging Face id or a short alias.
"""

from __future__ import annotations

import functools

import attrs

from simrl.cost.base import CostModelError


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

    # -- layer counts -------------------------------------------------------------------------

    @functools.cached_property
    def n_full_attention(self) -> int:
        return self.layers if self.full_attention_layers is None else self.full_attention_layers

    @functools.cached_property
    def n_linear_attention(self) -> int:
        return self.layers - self.n_full_attention

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
        kv_out = self.kv_heads * self.head_dim
        return [(self.hidden, q_out), (self.hidden, kv_out), (self.hidden, kv_out),
                (self.heads * self.head_dim, self.hidden)]

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
        """Parameters of one full-attention block (projections and q/k norms)."""
        return self._count(self.attention_matrices()) + (2 * self.head_dim if self.qk_norm else 0)

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
        return self.hidden * self.num_experts + shared + (self.hidden if self.shared_experts else 0)

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
            + (2 * self.layers + 1) * self.hidden  # RMSNorms
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
        norms = (2 * self.layers + 1) * self.hidden
        return self.active_params - self.embedding_params - norms - self.lm_head_params + self.vocab * self.hidden

    def weight_bytes(self, dtype_bytes: float = 2) -> float:
        return self.total_params * dtype_bytes

    # -- inference state -----------------------------------------------------------------------

    def kv_bytes_per_token(self, dtype_bytes: float = 2) -> float:
        """KV-cache bytes one token adds (keys and values of every full-attention layer)."""
        return 2 * self.n_full_attention * self.kv_heads * self.head_dim * dtype_bytes

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
        full = 4.0 * self.n_full_attention * self.heads * self.head_dim * context
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


_QWEN3_DENSE = dict(head_dim=128, vocab=151936, qk_norm=True, max_position=40960)
_MODELS: dict[str, ModelArch] = {
    m.name: m
    for m in (
        # huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
        ModelArch("Qwen/Qwen3-8B", layers=36, hidden=4096, heads=32, kv_heads=8, intermediate=12288,
                  **_QWEN3_DENSE),
        # huggingface.co/Qwen/Qwen3-32B/blob/main/config.json
        ModelArch("Qwen/Qwen3-32B", layers=64, hidden=5120, heads=64, kv_heads=8, intermediate=25600,
                  **_QWEN3_DENSE),
        # huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (every layer MoE)
        ModelArch("Qwen/Qwen3-30B-A3B", layers=48, hidden=2048, heads=32, kv_heads=4, intermediate=6144,
                  num_experts=128, experts_per_token=8, moe_intermediate=768, **_QWEN3_DENSE),
        # huggingface.co/Qwen/Qwen3.5-35B-A3B (text config): hybrid, 3 Gated DeltaNet layers then one
        # gated full-attention layer, repeated; every layer MoE with one shared expert.
        ModelArch("Qwen/Qwen3.5-35B-A3B", layers=40, hidden=2048, heads=16, kv_heads=2, head_dim=256,
                  intermediate=0, vocab=248320, qk_norm=True, attn_output_gate=True,
                  num_experts=256, experts_per_token=8, moe_intermediate=512, shared_experts=1,
                  shared_expert_intermediate=512, full_attention_layers=10, linear_key_heads=16,
                  linear_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
                  linear_conv_kernel=4, max_position=262144),
        # huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
        ModelArch("meta-llama/Llama-3.1-8B", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                  intermediate=14336, vocab=128256),
        # huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
        ModelArch("meta-llama/Llama-3.1-70B", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128,
                  intermediate=28672, vocab=128256),
        # huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
        ModelArch("meta-llama/Llama-2-7b-hf", layers=32, hidden=4096, heads=32, kv_heads=32, head_dim=128,
                  intermediate=11008, vocab=32000, max_position=4096),
        # huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json
        ModelArch("meta-llama/Llama-2-70b-hf", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128,
                  intermediate=28672, vocab=32000, max_position=4096),
        # huggingface.co/microsoft/phi-2/blob/main/config.json (GELU MLP, untied LM head)
        ModelArch("microsoft/phi-2", layers=32, hidden=2560, heads=32, kv_heads=32, head_dim=80,
                  intermediate=10240, vocab=51200, gated_mlp=False, max_position=2048),
        # Not a published checkpoint: the LLaMA-shaped model `srl-profile fsdp` builds in code (random
        # weights, about 5.2M parameters) so that profiling runs on a CPU in seconds; see adapters/fsdp.py.
        ModelArch("simrl/tiny-llama", layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64,
                  intermediate=768, vocab=4096, max_position=4096),
    )
}

_SUFFIXES = ("-instruct", "-base", "-chat", "-hf")


def _normalize(name: str) -> str:
    key = name.strip().lower().rsplit("/", 1)[-1].replace("_", "-")
    key = key.removeprefix("meta-")
    for suffix in _SUFFIXES:
        key = key.removesuffix(suffix)
    return key.replace("llama3", "llama-3").replace("llama2", "llama-2")


_ALIASES: dict[str, str] = {_normalize(n): n for n in _MODELS}


def model_names() -> list[str]:
    return sorted(_MODELS)


def model_arch(name: str | ModelArch) -> ModelArch:
    """Look up a model by Hugging Face id or alias, e.g. "qwen3-8b", "Qwen/Qwen3-8B"."""
    if isinstance(name, ModelArch):
        return name
    canon = _ALIASES.get(_normalize(str(name)))
    if canon is None:
        raise CostModelError(
            f"unknown model {name!r}; known models: {', '.join(model_names())} "
            f"(short aliases: {', '.join(sorted(_ALIASES))})"
        )
    return _MODELS[canon]
