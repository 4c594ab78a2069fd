"""Model table: derived parameter counts against published sizes, KV and state bytes, aliases."""

import pytest

from simrl.cost.architectures import model_arch, model_names
from simrl.cost.base import CostModelError

# Published total parameter counts (model cards / HF safetensors metadata).
PUBLISHED = {
    # Hugging Face model cards ("Number of Parameters" / safetensors "Model size").
    "Qwen/Qwen2.5-1.5B": 1.54e9,
    "Qwen/Qwen2.5-7B": 7.61e9,
    "Qwen/Qwen2.5-14B": 14.7e9,
    "Qwen/Qwen2.5-32B": 32.5e9,
    "Qwen/Qwen2.5-72B": 72.7e9,
    "Qwen/Qwen2.5-Math-1.5B": 1.54e9,
    "Qwen/Qwen2.5-Math-7B": 7.62e9,
    "Qwen/Qwen2.5-Math-72B": 72.7e9,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": 1.78e9,  # untied LM head: 1.54B + 151936 x 1536
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": 7.62e9,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": 14.8e9,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": 32.8e9,
    "Qwen/Qwen3-235B-A22B": 235e9,
    "deepseek-ai/DeepSeek-V3": 671e9,  # main model; the 14B MTP module is not counted (README_WEIGHTS.md)
    "openai/gpt-oss-20b": 20.9e9,  # OpenAI gpt-oss model card: 21B total, 3.6B active
    "openai/gpt-oss-120b": 116.8e9,  # 117B total, 5.1B active
    "Qwen/Qwen3-8B": 8.2e9,
    "Qwen/Qwen3-32B": 32.8e9,
    "Qwen/Qwen3-30B-A3B": 30.5e9,
    "Qwen/Qwen3.5-35B-A3B": 35e9,
    "meta-llama/Llama-3.1-8B": 8.03e9,
    "meta-llama/Llama-3.1-70B": 70.6e9,
    "meta-llama/Llama-2-7b-hf": 6.74e9,
    "meta-llama/Llama-2-70b-hf": 68.98e9,
    "microsoft/phi-2": 2.78e9,
    # Added in session 9 (tests/cost/test_catalog.py pins exact counts, non-embedding counts and KV bytes).
    "Qwen/Qwen3-0.6B": 0.6e9,  # model card: 0.6B (0.44B non-embedding)
    "Qwen/Qwen3-1.7B": 1.7e9,  # 1.7B (1.4B non-embedding)
    "Qwen/Qwen3-4B": 4.0e9,  # 4.0B (3.6B non-embedding)
    "Qwen/Qwen3-14B": 14.8e9,  # 14.8B (13.2B non-embedding)
    "Qwen/Qwen2.5-0.5B": 0.49e9,  # 0.49B (0.36B non-embedding)
    "Qwen/Qwen2.5-3B": 3.09e9,  # 3.09B (2.77B non-embedding)
    "meta-llama/Llama-3.2-1B": 1.23e9,  # Meta's Llama 3.2 model card
    "meta-llama/Llama-3.2-3B": 3.21e9,
    "mistralai/Mistral-7B-v0.3": 7.25e9,  # HF safetensors size
    "deepseek-ai/DeepSeek-V2-Lite": 15.7e9,  # DeepSeek-V2 paper / model card: 15.7B total, 2.4B active
    "zai-org/GLM-4.5-Air": 106e9,  # GLM-4.5 README: 106B total, 12B active (MTP layer not counted here)
    "Qwen/Qwen3-4B-Instruct-2507": 4.0e9,  # model card: 4.0B (3.6B non-embedding)
    "Qwen/Qwen3-30B-A3B-Instruct-2507": 30.5e9,  # 30.5B total, 3.3B active (29.9B non-embedding)
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": 30.5e9,  # 30.5B total, 3.3B active
    "allenai/OLMo-2-1124-7B": 7_298_617_344,  # HF safetensors metadata (test_catalog.py: the 0.003 % gap)
    "allenai/OLMo-2-1124-13B": 13_716_198_400,
    # keras-team/keras-hub preset metadata "params" (exact; test_catalog.py pins them to the parameter).
    "google/gemma-2-2b": 2_614_341_888,
    "google/gemma-2-9b": 9_241_705_984,
    "google/gemma-2-27b": 27_227_128_320,
    "google/gemma-3-1b-it": 999_885_952,
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


@pytest.mark.parametrize(("name", "active"), [("Qwen/Qwen3-30B-A3B", 3.3e9), ("Qwen/Qwen3.5-35B-A3B", 3.0e9),
                                             ("Qwen/Qwen3-235B-A22B", 22e9), ("deepseek-ai/DeepSeek-V3", 37e9)])
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
    # Qwen2.5-7B: 28 layers x 4 KV heads x 128 x 2 (K,V) x 2 bytes.
    assert model_arch("qwen2.5-7b-instruct").kv_bytes_per_token(2) == 28 * 4 * 128 * 2 * 2 == 57344
    # Qwen3-235B-A22B: 94 x 4 x 128 x 2 x 2.
    assert model_arch("qwen3-235b-a22b").kv_bytes_per_token(2) == 192512
    # Llama-3.1-8B: 32 x 8 x 128 x 2 x 2.
    assert model_arch("llama-3.1-8b").kv_bytes_per_token(2) == 131072


def test_mla_caches_the_compressed_latent():
    m = model_arch("deepseek-ai/DeepSeek-V3")
    assert m.is_mla and (m.head_dim, m.value_head_dim) == (192, 128)
    # One latent per token and layer: (kv_lora_rank 512 + rope 64) x 2 bytes x 61 layers = 70,272 B,
    # against 61 x 128 heads x (192 + 128) x 2 = 4,997,120 B for uncompressed K and V.
    assert m.kv_bytes_per_token(2) == 61 * (512 + 64) * 2 == 70272
    assert m.decode_attention_dims() == (576, 512)


def test_mla_attention_params_by_hand():
    m = model_arch("deepseek-v3")
    h, heads = 7168, 128
    q = h * 1536 + 1536 * heads * 192  # q_a_proj, q_b_proj (nope 128 + rope 64)
    kv = h * (512 + 64) + 512 * heads * (128 + 128)  # kv_a_proj_with_mqa, kv_b_proj (k_nope + v)
    o = heads * 128 * h
    assert m.attention_params == q + kv + o + 1536 + 512  # + q_a / kv_a layernorms
    # 3 dense layers (first_k_dense_replace), 58 MoE layers of 256 routed + 1 ungated shared expert.
    assert (m.dense_layers, m.n_moe_layers, m.shared_experts, m.shared_expert_gate) == (3, 58, 1, False)
    assert m.expert_params == 3 * h * 2048
    assert m.moe_block_dense_params == h * 256 + 3 * h * 2048  # router + shared expert


def test_qwen2_has_qkv_bias():
    m = model_arch("qwen2.5-7b")
    h, q, kv = 3584, 28 * 128, 4 * 128
    assert m.attention_params == h * q + 2 * h * kv + q * h + (q + 2 * kv)


def test_tied_and_untied_heads_differ_by_the_vocab_matrix():
    tied, untied = model_arch("Qwen/Qwen2.5-Math-1.5B"), model_arch("deepseek-r1-distill-qwen-1.5b")
    assert tied.tied_embeddings and not untied.tied_embeddings
    assert untied.total_params - tied.total_params == 151936 * 1536


def test_math_variants_share_shapes():
    a, b = model_arch("Qwen/Qwen2.5-Math-7B"), model_arch("Qwen/Qwen2.5-7B")
    assert a.total_params == b.total_params and a.kv_bytes_per_token() == b.kv_bytes_per_token()
    assert a.max_position == 4096 < b.max_position


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


# -- config.json reading ---------------------------------------------------------------------------

def _mistral_like(**extra):
    return {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
            "sliding_window": 4096, "max_position_embeddings": 32768, **extra}


def test_any_config_json_path_becomes_an_architecture(tmp_path):
    import json

    d = tmp_path / "my-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(_mistral_like()))
    for ref in (str(d / "config.json"), str(d)):
        m = model_arch(ref)
        assert m.name == "my-model" and (m.layers, m.kv_heads) == (32, 8)


def test_sliding_window_bounds_the_cache_per_sequence():
    from simrl.cost.architectures import arch_from_hf_config

    m = arch_from_hf_config(_mistral_like(), "mistral-like")
    assert (m.sliding_window, m.sliding_window_layers) == (4096, 32)
    per_tok = 32 * 8 * 128 * 2 * 2  # 131,072 B
    assert m.kv_bytes_per_token(2) == per_tok
    assert m.kv_bytes_per_seq(1000) == 1000 * per_tok
    assert m.kv_bytes_per_seq(10000) == 4096 * per_tok  # every layer keeps only the window
    # layer_types: half the layers slide.
    half = arch_from_hf_config(_mistral_like(layer_types=["sliding_attention", "full_attention"] * 16), "x")
    assert half.kv_bytes_per_seq(10000) == (16 * 10000 + 16 * 4096) * per_tok // 32
    # Qwen2 keeps every layer full unless use_sliding_window is set.
    assert model_arch("qwen2.5-7b").sliding_window_layers == 0


def test_qwen_moe_layer_pattern_keys():
    from simrl.cost.architectures import arch_from_hf_config

    base = {"model_type": "qwen3_moe", "hidden_size": 256, "num_hidden_layers": 8, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000,
            "num_experts": 16, "num_experts_per_tok": 2, "moe_intermediate_size": 128}
    assert arch_from_hf_config(base, "a").n_moe_layers == 8
    assert arch_from_hf_config({**base, "decoder_sparse_step": 2}, "b").n_moe_layers == 4
    assert arch_from_hf_config({**base, "mlp_only_layers": [0, 7]}, "c").n_moe_layers == 6


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"hidden_size": 8, "num_attention_heads": 2, "vocab_size": 10, "intermediate_size": 16},
         "missing required key 'num_hidden_layers'"),
        ({"hidden_size": 8, "num_hidden_layers": "2", "num_attention_heads": 2, "vocab_size": 10,
          "intermediate_size": 16}, "num_hidden_layers: expected a positive integer"),
        ({"model_type": "mamba", "hidden_size": 8}, "not a decoder-only transformer"),
        ({"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10,
          "intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 8}, "exceeds the 4 experts"),
    ],
)
def test_bad_config_json_names_file_and_key(tmp_path, cfg, message):
    import json

    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    with pytest.raises(CostModelError) as exc:
        model_arch(str(f))
    assert str(f) in str(exc.value) and message in str(exc.value)


def test_unreadable_config_json(tmp_path):
    f = tmp_path / "broken.json"
    f.write_text("{not json")
    with pytest.raises(CostModelError, match=r"broken.json:1: not valid JSON"):
        model_arch(str(f))
    with pytest.raises(CostModelError, match="cannot read"):
        model_arch(str(tmp_path / "missing.json"))


def test_model_slug_is_file_name_safe(tmp_path):
    from simrl.cost.architectures import model_slug

    assert model_slug("qwen3-8b") == "qwen3-8b"
    assert model_slug("Qwen/Qwen3-8B") == "Qwen--Qwen3-8B"
    assert model_slug("/data/models/my-model/config.json") == "my-model"
    assert model_slug("/data/x/custom 7b.json") == "custom-7b"
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text("{}")
    assert model_slug(str(d)) == "ckpt"


@pytest.mark.parametrize(
    ("alias", "target"),
    [("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"), ("DeepSeek-V3.1", "deepseek-ai/DeepSeek-V3"),
     ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "meta-llama/Llama-3.1-8B"),
     ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.1-70B"),
     ("Qwen/Qwen2.5-Math-7B-Instruct", "Qwen/Qwen2.5-Math-7B")],
)
def test_same_shape_aliases(alias, target):
    assert model_arch(alias).name == target


def test_bad_alias_table_names_the_entry(tmp_path):
    from simrl.cost.architectures import _catalog, _load_aliases

    models, aliases = _catalog()
    f = tmp_path / "aliases.yaml"
    f.write_text("acme/Foo-7B: acme/Bar-7B\n")
    with pytest.raises(CostModelError, match=r"aliases.yaml:acme/Foo-7B: 'acme/Bar-7B' is not a bundled model"):
        _load_aliases(f, models, dict(aliases))
    f.write_text("Qwen/Qwen3-8B: Qwen/Qwen3-32B\n")
    with pytest.raises(CostModelError, match="already names Qwen/Qwen3-8B"):
        _load_aliases(f, models, dict(aliases))


def test_gpt_oss_alternating_sliding_window_by_hand():
    m = model_arch("openai/gpt-oss-20b")
    assert (m.sliding_window, m.sliding_window_layers, m.n_moe_layers, m.num_experts) == (128, 12, 24, 32)
    # 24 layers x 8 KV heads x (64 + 64) x 2 B = 49,152 B/token without window eviction; with it a
    # 10,000-token sequence holds (12 x 10,000 + 12 x 128) x 2,048 B = 248,905,728 B.
    assert m.kv_bytes_per_token(2) == 49152
    assert m.kv_bytes_per_seq(10_000) == 248_905_728
    # The model card's active count leaves out the 201,088 x 2,880 embedding table.
    assert m.active_params - m.embedding_params == pytest.approx(3.6e9, rel=0.02)
    big = model_arch("gpt-oss-120b")
    assert big.active_params - big.embedding_params == pytest.approx(5.1e9, rel=0.02)
