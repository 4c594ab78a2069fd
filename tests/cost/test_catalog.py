"""The open catalog end to end: a custom GPU and a config.json model given in the run config."""

import json

import pytest

from simrl.config import ConfigError, load_config
from simrl.cost.architectures import model_arch
from simrl.cost.base import CostModelError
from simrl.cost.build import build_costs
from simrl.cost.catalog import data_path


def test_custom_gpu_in_the_config_prices_the_rollout():
    cfg = load_config(None, ["deployment.rollout.gpu={name: MyChip, flops: 989 TFLOPS, hbm_bytes: 80 GiB, "
                             "hbm_bw: 3.35 TB/s, intra_node_bw: 450 GB/s, inter_node_bw: 400 Gb/s}"])
    ref = build_costs(load_config(None, ["deployment.rollout.gpu=H100"])).rollout
    got = build_costs(cfg).rollout
    assert got.gpu.name == "MyChip"
    # Same figures as H100 except the reported HBM capacity (80 GiB vs 81559 MiB): identical step times.
    assert got.iteration_time(64, 64 * 2000, 0) == ref.iteration_time(64, 64 * 2000, 0)
    # Half the HBM bandwidth makes memory-bound decode slower.
    slow = build_costs(load_config(None, ["deployment.rollout.gpu={name: Slow, base: H100, hbm_bw: 1.675 TB/s}"]))
    assert slow.rollout.iteration_time(64, 64 * 2000, 0) > 1.5 * ref.iteration_time(64, 64 * 2000, 0) - 0.01


def test_gpu_yaml_file_in_the_config(tmp_path):
    f = tmp_path / "chip.yaml"
    f.write_text("name: Chip\nbase: H200\nhbm_bytes: 100 GiB\n")
    costs = build_costs(load_config(None, [f"deployment.training.gpu={f}"]))
    assert costs.training.memory_capacity_bytes() == 100 * 2**30


def test_bad_custom_gpu_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"deployment.rollout.gpu: gpu.hbm_bw: required"):
        load_config(None, ["deployment.rollout.gpu={name: X, flops: 1 PFLOPS, hbm_bytes: 80 GB}"])


def test_model_by_config_json_path(tmp_path):
    src = json.loads((data_path("models") / "Qwen--Qwen3-8B.json").read_text())
    f = tmp_path / "config.json"
    f.write_text(json.dumps(src))
    by_path = build_costs(load_config(None, [f"deployment.model={f}"]))
    by_id = build_costs(load_config(None, ["deployment.model=Qwen/Qwen3-8B"]))
    assert by_path.rollout.kv_capacity_tokens() == by_id.rollout.kv_capacity_tokens()
    assert by_path.training.step_time([1000, 2000]) == by_id.training.step_time([1000, 2000])


# -- Bundled models used by RL post-training runs ---------------------------------------------------
# Each file under simrl/cost/catalog/models/ is the model's Hugging Face config.json (its "_source"
# key says where it was copied from and what it was checked against). Figures below are published
# ones, each with where it is published.


# Exact parameter counts published by keras-team/keras-hub (each preset's metadata "params", counted
# from the converted checkpoint): keras_hub/src/models/qwen3/qwen3_presets.py @1df65dab,
# keras_hub/src/models/qwen/qwen_presets.py @12870d27, keras_hub/src/models/llama3/llama3_presets.py
# @2f5dce1e. The derived count must match to the parameter.
EXACT_PARAMS = {
    "Qwen/Qwen3-0.6B": 596_049_920,
    "Qwen/Qwen3-1.7B": 1_720_574_976,
    "Qwen/Qwen3-4B": 4_022_468_096,
    "Qwen/Qwen3-8B": 8_190_735_360,
    "Qwen/Qwen3-14B": 14_768_307_200,
    "Qwen/Qwen3-32B": 32_762_123_264,
    "Qwen/Qwen2.5-0.5B": 494_032_768,
    "Qwen/Qwen2.5-1.5B": 1_543_714_304,
    "Qwen/Qwen2.5-3B": 3_085_938_688,
    "Qwen/Qwen2.5-32B": 32_763_876_352,
    "Qwen/Qwen2.5-72B": 72_706_203_648,
    "Qwen/Qwen2.5-Math-7B": 7_615_616_512,
    "meta-llama/Llama-3.1-8B": 8_030_261_248,
    # keras-hub's Mistral 7B (v0.1/v0.2, vocab 32,000) has 7,241,732,096; v0.3 widens the vocabulary
    # to 32,768: + 768 x 4,096 x 2 (embedding and untied LM head) = 7,248,023,552.
    "mistralai/Mistral-7B-v0.3": 7_241_732_096 + 768 * 4096 * 2,
    # Hugging Face safetensors metadata totals, as quoted in public copies (e.g. GPTQModel's
    # parameter-count test for Llama-3.2-1B; chatllm.cpp's load banner for DeepSeek-V2-Lite).
    "meta-llama/Llama-3.2-1B": 1_235_814_400,
    "meta-llama/Llama-3.2-3B": 3_212_749_824,
    "deepseek-ai/DeepSeek-V2-Lite": 15_706_484_224,
    # keras-hub keras_hub/src/models/gemma/gemma_presets.py @cf8818bc ("gemma2_2b_en", "gemma2_9b_en",
    # "gemma2_27b_en") and keras_hub/src/models/gemma3/gemma3_presets.py @46f3b4a0 ("gemma3_instruct_1b").
    # Exact only with Gemma's four norms per layer and tied embeddings. gemma-2-2b by hand: per layer
    # attention 2304 x (2048 + 1024 + 1024) + 2048 x 2304 = 14,155,776, MLP 3 x 2304 x 9216 =
    # 63,700,992, norms 4 x 2304 = 9,216; x 26 = 2,024,515,584; + embedding 256000 x 2304 =
    # 589,824,000 + final norm 2,304 = 2,614,341,888.
    "google/gemma-2-2b": 2_614_341_888,
    "google/gemma-2-9b": 9_241_705_984,
    "google/gemma-2-27b": 27_227_128_320,
    "google/gemma-3-1b-it": 999_885_952,
}


@pytest.mark.parametrize("name", sorted(EXACT_PARAMS))
def test_parameter_count_is_exact(name):
    assert model_arch(name).total_params == EXACT_PARAMS[name]


# Model cards' "Number of Parameters (Non-Embedding)" (Qwen3 and Qwen2.5 cards on Hugging Face; the
# Qwen3 technical report's model table has the same split). Non-embedding = total minus the input
# embedding and, when untied, the LM head. Tolerance 3 %: the cards round to 0.01-0.1 B.
NON_EMBEDDING = {
    "Qwen/Qwen3-0.6B": 0.44e9,
    "Qwen/Qwen3-1.7B": 1.4e9,
    "Qwen/Qwen3-4B": 3.6e9,
    "Qwen/Qwen3-14B": 13.2e9,
    "Qwen/Qwen2.5-0.5B": 0.36e9,
    "Qwen/Qwen2.5-3B": 2.77e9,
    "Qwen/Qwen3-4B-Instruct-2507": 3.6e9,
    "Qwen/Qwen3-30B-A3B-Instruct-2507": 29.9e9,
}


@pytest.mark.parametrize("name", sorted(NON_EMBEDDING))
def test_non_embedding_count_matches_the_model_card(name):
    m = model_arch(name)
    assert m.total_params - m.embedding_params - m.lm_head_params == pytest.approx(NON_EMBEDDING[name], rel=0.03)


def test_small_models_tie_the_lm_head():
    # Qwen3 <= 4B, Qwen2.5 <= 3B and Llama 3.2 tie the LM head to the embedding; Qwen3-14B does not.
    for name in ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-3B",
                 "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B"):
        assert model_arch(name).lm_head_params == 0, name
    assert model_arch("Qwen/Qwen3-14B").lm_head_params == 151936 * 5120


def test_llama_3_2_sizes_match_the_model_card():
    # Meta's Llama 3.2 model card: 1.23B and 3.21B parameters (1% tolerance: rounded to 0.01 B).
    assert model_arch("meta-llama/Llama-3.2-1B").total_params == pytest.approx(1.23e9, rel=0.01)
    assert model_arch("meta-llama/Llama-3.2-3B").total_params == pytest.approx(3.21e9, rel=0.01)


def test_deepseek_v2_lite_mla_moe_sizes():
    # DeepSeek-V2 paper / DeepSeek-V2-Lite model card: 15.7B total, 2.4B activated per token.
    m = model_arch("deepseek-ai/DeepSeek-V2-Lite")
    assert m.is_mla and m.q_lora_rank == 0  # q_lora_rank null: a full q_proj
    assert (m.num_experts, m.experts_per_token, m.shared_experts, m.dense_layers) == (64, 6, 2, 1)
    assert m.total_params == pytest.approx(15.7e9, rel=0.01)
    # Activated, without the 102,400 x 2,048 embedding lookup: 2.45 B.
    assert m.active_params - m.embedding_params == pytest.approx(2.4e9, rel=0.03)


def test_glm_4_5_air_moe_sizes():
    # zai-org/GLM-4.5 README: 106B total, 12B active. The one MTP layer (num_nextn_predict_layers)
    # is not counted, as for DeepSeek-V3.
    m = model_arch("zai-org/GLM-4.5-Air")
    assert (m.num_experts, m.experts_per_token, m.shared_experts, m.dense_layers) == (128, 8, 1, 1)
    assert m.attention_bias and not m.qk_norm and m.mtp_layers == 1
    assert m.total_params == pytest.approx(106e9, rel=0.02)
    # Active without the input embedding and the LM head (151,552 x 4,096 each): 12.18 B (with the
    # LM head 12.80 B, 7 % over the published 12 B).
    assert m.active_params - m.embedding_params - m.lm_head_params == pytest.approx(12e9, rel=0.03)


# KV-cache bytes per token in BF16, derived by hand: layers x KV heads x head_dim x 2 (K, V) x 2 bytes;
# MLA: layers x (kv_lora_rank + qk_rope_head_dim) x 2 bytes.
KV_BYTES = {
    "Qwen/Qwen3-0.6B": 28 * 8 * 128 * 2 * 2,  # 114,688
    "Qwen/Qwen3-1.7B": 28 * 8 * 128 * 2 * 2,  # 114,688
    "Qwen/Qwen3-4B": 36 * 8 * 128 * 2 * 2,  # 147,456
    "Qwen/Qwen3-14B": 40 * 8 * 128 * 2 * 2,  # 163,840
    "Qwen/Qwen2.5-0.5B": 24 * 2 * 64 * 2 * 2,  # 12,288 (head_dim 896 / 14 = 64)
    "Qwen/Qwen2.5-3B": 36 * 2 * 128 * 2 * 2,  # 36,864
    "meta-llama/Llama-3.2-1B": 16 * 8 * 64 * 2 * 2,  # 32,768 (head_dim 64)
    "meta-llama/Llama-3.2-3B": 28 * 8 * 128 * 2 * 2,  # 114,688
    "mistralai/Mistral-7B-v0.3": 32 * 8 * 128 * 2 * 2,  # 131,072
    "deepseek-ai/DeepSeek-V2-Lite": 27 * (512 + 64) * 2,  # 31,104 (MLA latent)
    "zai-org/GLM-4.5-Air": 46 * 8 * 128 * 2 * 2,  # 188,416
    "Qwen/Qwen3-4B-Instruct-2507": 36 * 8 * 128 * 2 * 2,  # 147,456
    "Qwen/Qwen3-30B-A3B-Instruct-2507": 48 * 4 * 128 * 2 * 2,  # 98,304
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": 48 * 4 * 128 * 2 * 2,  # 98,304
    "allenai/OLMo-2-1124-7B": 32 * 32 * 128 * 2 * 2,  # 524,288 (no GQA)
    "allenai/OLMo-2-1124-13B": 40 * 40 * 128 * 2 * 2,  # 819,200
    # Gemma: every layer counted (the bound for a cache without window eviction); the sliding layers'
    # window is priced by kv_bytes_per_seq, pinned in test_gemma_sliding_layers_hold_at_most_the_window.
    "google/gemma-2-2b": 26 * 4 * 256 * 2 * 2,  # 106,496
    "google/gemma-2-9b": 42 * 8 * 256 * 2 * 2,  # 344,064
    "google/gemma-2-27b": 46 * 16 * 128 * 2 * 2,  # 376,832
    "google/gemma-3-1b-it": 26 * 1 * 256 * 2 * 2,  # 26,624
}


@pytest.mark.parametrize("name", sorted(KV_BYTES))
def test_kv_bytes_per_token_by_hand(name):
    assert model_arch(name).kv_bytes_per_token(2) == KV_BYTES[name]


def test_mistral_v0_3_has_no_sliding_window():
    # v0.3's config.json has "sliding_window": null: every token stays in the cache (v0.1 kept 4,096).
    m = model_arch("mistralai/Mistral-7B-v0.3")
    assert m.sliding_window_layers == 0
    assert m.kv_bytes_per_seq(20_000) == 20_000 * 131_072


def test_bundled_files_say_where_they_come_from():
    for f in sorted(data_path("models").glob("*.json")):
        src = json.loads(f.read_text()).get("_source")
        if src is not None:
            assert "huggingface.co" in src or "simrl" in f.name, f.name


@pytest.mark.parametrize(("model", "extra"), [("Qwen/Qwen3-0.6B", []),
                                              # 15.7 B with Adam: FSDP-shard it over the 8 GPUs
                                              ("deepseek-ai/DeepSeek-V2-Lite", ["deployment.training.zero_stage=3"])])
def test_new_models_build_costs_from_the_run_config(model, extra):
    costs = build_costs(load_config(None, [f"deployment.model={model}", *extra]))
    assert costs.rollout.kv_capacity_tokens() > 0
    assert costs.training.step_time([1000, 2000]) > 0


@pytest.mark.parametrize(("release", "original"), [
    ("Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen3-4B"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen/Qwen3-30B-A3B"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen/Qwen3-30B-A3B"),
])
def test_2507_releases_keep_the_shapes_and_extend_the_context(release, original):
    # Model cards: 262,144 tokens natively; the April Qwen3 files say 40,960.
    new, old = model_arch(release), model_arch(original)
    assert new.name == release
    assert (new.total_params, new.active_params) == (old.total_params, old.active_params)
    assert (new.max_position, old.max_position) == (262_144, 40_960)


@pytest.mark.parametrize(("alias", "target"), [
    ("Qwen/Qwen3-4B-Thinking-2507", "Qwen/Qwen3-4B-Instruct-2507"),
    ("Qwen/Qwen3-30B-A3B-Thinking-2507", "Qwen/Qwen3-30B-A3B-Instruct-2507"),
    ("qwen3-coder-30b-a3b-instruct", "Qwen/Qwen3-Coder-30B-A3B-Instruct"),
    ("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-3B"),
    ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B"),
    ("llama3.2-3b-instruct", "meta-llama/Llama-3.2-3B"),
    ("Qwen/Qwen3-14B-Base", "Qwen/Qwen3-14B"),
])
def test_new_aliases(alias, target):
    assert model_arch(alias).name == target


@pytest.mark.parametrize(("name", "published", "layers", "hidden", "kv_width"), [
    # Hugging Face safetensors metadata ("total"): OLMo-2-1124-7B 7,298,617,344; -13B 13,716,198,400.
    ("allenai/OLMo-2-1124-7B", 7_298_617_344, 32, 4096, 32 * 128),
    ("allenai/OLMo-2-1124-13B", 13_716_198_400, 40, 5120, 40 * 128),
])
def test_olmo2_count_misses_only_the_full_width_qk_norms(name, published, layers, hidden, kv_width):
    # OLMo 2 normalises q and k over the whole projection (q_norm: heads x head_dim = hidden,
    # k_norm: kv_heads x head_dim) where Qwen3 normalises per head (2 x head_dim); the catalog counts
    # the per-head form. The gap is exactly layers x (hidden + kv_width - 2 x 128): 253,952 for 7B.
    m = model_arch(name)
    assert m.qk_norm and m.max_position == 4096
    assert published - m.total_params == layers * (hidden + kv_width - 2 * 128)
    assert m.total_params == pytest.approx(published, rel=1e-4)


# Gemma config.json files carry no layer_types; transformers derives them (layer i slides unless
# (i + 1) % pattern == 0): Gemma 2 pattern 2, Gemma 3 sliding_window_pattern 6.
@pytest.mark.parametrize(("name", "window", "sliding", "global_"), [
    ("google/gemma-2-2b", 4096, 13, 13),  # layers 0, 2, ..., 24 slide; 1, 3, ..., 25 global
    ("google/gemma-2-9b", 4096, 21, 21),
    ("google/gemma-2-27b", 4096, 23, 23),
    ("google/gemma-3-1b-it", 512, 22, 4),  # global: layers 5, 11, 17, 23
])
def test_gemma_sliding_layer_counts(name, window, sliding, global_):
    m = model_arch(name)
    assert m.norms_per_layer == 4 and m.tied_embeddings
    assert (m.sliding_window, m.sliding_window_layers, m.n_full_attention - m.sliding_window_layers) == (
        window, sliding, global_)


def test_gemma_sliding_layers_hold_at_most_the_window():
    # gemma-2-9b: per token and layer 8 KV heads x 256 x 2 (K, V) x 2 bytes = 8,192 bytes. At 8,192
    # tokens: 21 global layers x 8,192 tokens + 21 sliding layers x 4,096 tokens = 258,048 token-layers
    # x 8,192 = 2,113,929,216 bytes (all 42 layers full would be 2,818,572,288).
    m = model_arch("google/gemma-2-9b")
    assert m.kv_bytes_per_seq(8192) == (21 * 8192 + 21 * 4096) * 8192 == 2_113_929_216
    assert m.kv_bytes_per_seq(2000) == 42 * 2000 * 8192  # shorter than the window: every layer keeps all
    # gemma-3-1b-it: 1 KV head x 256 x 2 x 2 = 1,024 bytes per token and layer; at 32,768 tokens
    # 4 global x 32,768 + 22 sliding x 512 = 142,336 token-layers = 145,752,064 bytes.
    g3 = model_arch("google/gemma-3-1b-it")
    assert g3.kv_bytes_per_seq(32768) == (4 * 32768 + 22 * 512) * 1024 == 145_752_064


def test_gemma3_multimodal_text_config_takes_the_config_class_defaults():
    # A Gemma 3 multimodal config.json lists in text_config only what differs from Gemma3TextConfig's
    # defaults (heads 8, KV heads 4, head_dim 256, vocab 262,208, tied, sliding_window_pattern 6).
    # Shapes of gemma-3-4b (2,560 wide, 10,240 MLP, 34 layers, 1,024 window) as in simaai's published
    # devkit copy of that model's config. keras-hub gemma3_presets.py @46f3b4a0 counts the text-only
    # 4B at 3,880,099,328 with a 262,144 vocabulary; the default 262,208 rows add 64 x 2,560.
    text = {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
            "num_hidden_layers": 34, "sliding_window": 1024}
    m = model_arch({"model_type": "gemma3", "text_config": text, "vision_config": {}})
    assert (m.heads, m.kv_heads, m.head_dim, m.vocab, m.tied_embeddings) == (8, 4, 256, 262_208, True)
    assert (m.sliding_window, m.sliding_window_layers) == (1024, 34 - 5)  # global: 5, 11, 17, 23, 29
    assert m.total_params == 3_880_099_328 + 64 * 2560
    assert model_arch({"model_type": "gemma3", "text_config": {**text, "vocab_size": 262_144}}).total_params == (
        3_880_099_328)
    # An explicit pattern is honoured; a zero one is an error naming the key.
    assert model_arch({"model_type": "gemma3", "text_config": {**text, "sliding_window_pattern": 2}}
                      ).sliding_window_layers == 17
    with pytest.raises(CostModelError, match="text_config.sliding_window_pattern"):
        model_arch({"model_type": "gemma3", "text_config": {**text, "sliding_window_pattern": 0}})
    # Explicit layer_types win over the pattern.
    lt = ["full_attention"] * 34
    assert model_arch({"model_type": "gemma3", "text_config": {**text, "layer_types": lt}}).sliding_window_layers == 0


def test_gemma_2_9b_builds_costs_from_the_run_config():
    costs = build_costs(load_config(None, ["deployment.model=google/gemma-2-9b"]))
    assert costs.rollout.kv_capacity_tokens() > 0
    assert costs.training.step_time([1000, 2000]) > 0
