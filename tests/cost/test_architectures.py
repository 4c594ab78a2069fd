"""Model table: derived parameter counts against published sizes, KV and state bytes, aliases."""

import pytest

from simrl.cost.architectures import model_arch, model_names
from simrl.cost.base import CostModelError

# Published total parameter counts (model cards / HF safetensors metadata).
PUBLISHED = {
    "Qwen/Qwen3-8B": 8.2e9,
    "Qwen/Qwen3-32B": 32.8e9,
    "Qwen/Qwen3-30B-A3B": 30.5e9,
    "Qwen/Qwen3.5-35B-A3B": 35e9,
    "meta-llama/Llama-3.1-8B": 8.03e9,
    "meta-llama/Llama-3.1-70B": 70.6e9,
    "meta-llama/Llama-2-7b-hf": 6.74e9,
    "meta-llama/Llama-2-70b-hf": 68.98e9,
    "microsoft/phi-2": 2.78e9,
    # Not published: the CPU profiling model srl-profile fsdp builds, counted by hand: 4 layers x
    # (attention 256*256 + 2*256*128 + 256*256 = 196,608; MLP 3*256*768 = 589,824; 2 norms 512)
    # + embedding and LM head 2*4096*256 + final norm 256 = 5,245,184 (tests/adapters/test_fsdp.py
    # checks the built torch module has exactly this many).
    "simrl/tiny-llama": 5_245_184,
}


def test_every_model_has_a_published_size():
    assert set(PUBLISHED) == set(model_names())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_params_match_published_sizes(name):
    got = model_arch(name).total_params
    assert got == pytest.approx(PUBLISHED[name], rel=0.03)


@pytest.mark.parametrize(("name", "active"), [("Qwen/Qwen3-30B-A3B", 3.3e9), ("Qwen/Qwen3.5-35B-A3B", 3.0e9)])
def test_moe_active_params(name, active):
    m = model_arch(name)
    assert m.active_params == pytest.approx(active, rel=0.2)
    assert m.active_params < m.total_params / 8


def test_dense_active_equals_total():
    m = model_arch("qwen3-8b")
    assert m.active_params == m.total_params
    assert m.routed_expert_params == 0


def test_kv_bytes_per_token():
    # Qwen3-8B: 2 (K,V) x 36 layers x 8 kv heads x 128 x 2 bytes = 144 KiB.
    assert model_arch("qwen3-8b").kv_bytes_per_token(2) == 147456
    assert model_arch("llama-2-7b").kv_bytes_per_token(2) == 2 * 32 * 32 * 128 * 2
    assert model_arch("qwen3-8b").kv_bytes_per_token(1) == 73728  # fp8 KV


def test_hybrid_model_has_small_kv_and_a_fixed_state():
    m = model_arch("Qwen/Qwen3.5-35B-A3B")
    assert (m.n_full_attention, m.n_linear_attention) == (10, 30)
    # Only the 10 gated-attention layers grow a KV: 2 x 10 x 2 x 256 x 2 bytes.
    assert m.kv_bytes_per_token(2) == 20480
    state = m.linear_state_bytes_per_seq(2)
    # 30 layers x (32 heads x 128 x 128 matrix state + conv window) in bf16: ~31 MiB per sequence.
    assert 30 * 32 * 128 * 128 * 2 < state < 1.1 * 30 * 32 * 128 * 128 * 2
    assert model_arch("qwen3-8b").linear_state_bytes_per_seq() == 0


def test_flops_per_token_is_two_per_param_plus_attention():
    m = model_arch("qwen3-8b")
    base = m.flops_per_token(0)
    # The embedding lookup costs nothing; the LM head is a matmul.
    assert base == pytest.approx(2 * (m.total_params - m.embedding_params), rel=0.01)
    assert m.flops_per_token(4096) - base == pytest.approx(4 * 36 * 32 * 128 * 4096)


def test_weight_bytes():
    m = model_arch("qwen3-8b")
    assert m.weight_bytes(2) == 2 * m.total_params


def test_lora_params_by_hand():
    m = model_arch("qwen3-8b")
    r = 16
    h, q, kv, inter = 4096, 32 * 128, 8 * 128, 12288
    per_layer = r * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + inter) + (inter + h))
    assert m.lora_params(r) == 36 * per_layer
    moe = model_arch("qwen3-30b-a3b")
    assert moe.lora_params(8, include_experts=True) > 10 * moe.lora_params(8)


@pytest.mark.parametrize(
    "alias",
    ["qwen3-8b", "Qwen/Qwen3-8B", "QWEN3_8B", "Qwen3-8B-Base"],
)
def test_aliases(alias):
    assert model_arch(alias).name == "Qwen/Qwen3-8B"


def test_llama_aliases():
    assert model_arch("meta-llama/Meta-Llama-3.1-8B-Instruct").name == "meta-llama/Llama-3.1-8B"
    assert model_arch("llama3.1-70b").name == "meta-llama/Llama-3.1-70B"
    assert model_arch("Llama-2-7b-hf").name == "meta-llama/Llama-2-7b-hf"
    assert model_arch("phi-2").name == "microsoft/phi-2"


def test_unknown_model_lists_known_ones():
    with pytest.raises(CostModelError) as exc:
        model_arch("gpt-5")
    assert "Qwen/Qwen3-8B" in str(exc.value)
    assert "qwen3-8b" in str(exc.value)
