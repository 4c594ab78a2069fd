"""`srl-profile kv-probe`: the pure engine -> observation conversion, the missing-vLLM error and
the command's wiring with a stand-in `vllm` module (the real vLLM path needs a GPU: untested)."""

import sys
import types

import pytest
from click.testing import CliRunner

import adapters.vllm_probe as vp
from adapters.cli import cli as profile_cli
from adapters.extras import MissingExtraError
from simrl.cost.observations import read_observations, write_observations

NS = types.SimpleNamespace


def v1_engine(blocks=2048, block_size=16, util=0.9, max_len=4096, dtype="auto"):
    """Shaped like vllm.LLM on a V1 engine: llm_engine.vllm_config.{cache,model}_config."""
    cc = NS(num_gpu_blocks=blocks, block_size=block_size, gpu_memory_utilization=util, cache_dtype=dtype)
    return NS(llm_engine=NS(vllm_config=NS(cache_config=cc, model_config=NS(max_model_len=max_len))))


def test_v1_engine_to_observation():
    ob = vp.kv_probe_observation(v1_engine(), model="Qwen/Qwen3-8B", tp=2, hardware="NVIDIA H100",
                                 software={"vllm": "0.11.0"}, date="2025-01-01", host="node1")
    assert (ob.kind, ob.value, ob.unit) == ("kv_probe", 2048 * 16, "tokens")
    assert ob.inputs == {"tp": 2, "pp": 1, "model": "Qwen/Qwen3-8B", "block_size": 16,
                         "gpu_memory_utilization": 0.9, "max_model_len": 4096, "kv_cache_dtype": "auto"}
    assert ob.provenance["engine"] == {"num_gpu_blocks": 2048, "block_size": 16}
    assert ob.provenance["hardware"] == "NVIDIA H100" and ob.provenance["software"]["vllm"] == "0.11.0"
    assert ob.provenance["source"] == "srl-profile kv-probe on node1"


def test_v0_engine_and_explicit_arguments_win():
    engine = NS(llm_engine=NS(cache_config=NS(num_gpu_blocks=100, block_size=32, gpu_memory_utilization=0.9),
                              model_config=NS(max_model_len=2048)))
    ob = vp.kv_probe_observation(engine, model="m", gpu_memory_utilization=0.5, max_model_len=1024)
    assert ob.value == 3200 and ob.inputs["gpu_memory_utilization"] == 0.5 and ob.inputs["max_model_len"] == 1024
    assert ob.provenance["hardware"] == "unknown" and ob.provenance["date"]  # a real timestamp


def test_cache_config_numbers_directly(tmp_path):
    ob = vp.kv_probe_observation({"num_gpu_blocks": 10, "block_size": 16}, model="m")
    assert ob.value == 160 and "gpu_memory_utilization" not in ob.inputs
    path = tmp_path / "kv.jsonl"
    write_observations(path, [ob])
    assert read_observations(path)[0].value == 160  # valid on the way back in


def test_engine_reported_tokens_are_kept_for_comparison():
    engine = v1_engine()
    engine.llm_engine.vllm_config.cache_config.kv_cache_size_tokens = 32000
    ob = vp.kv_probe_observation(engine, model="m")
    assert ob.value == 2048 * 16 and ob.provenance["engine"]["kv_cache_size_tokens"] == 32000


@pytest.mark.parametrize("engine, match", [
    (v1_engine(blocks=None), "was the engine initialised"),
    (NS(), "was the engine initialised"),
    (v1_engine(blocks=0), "num_gpu_blocks must be a positive integer"),
    (v1_engine(block_size=16.0), "block_size must be a positive integer"),
])
def test_rejects_missing_or_bad_numbers(engine, match):
    with pytest.raises(ValueError, match=match):
        vp.kv_probe_observation(engine, model="m")


def test_missing_vllm_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(MissingExtraError, match=r"profile-vllm.*simrl\[profile-vllm\]"):
        vp.probe_vllm("Qwen/Qwen3-8B")
    res = CliRunner().invoke(profile_cli, ["kv-probe", "--model", "Qwen/Qwen3-8B", "-o", str(tmp_path / "kv.jsonl")])
    assert res.exit_code == 2 and "profile-vllm" in res.output


def test_probe_rejects_bad_arguments_before_importing_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    for kwargs, match in (({"tp": 0}, "tp must be"), ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
                          ({"max_model_len": 0}, "max_model_len")):
        with pytest.raises(ValueError, match=match):
            vp.probe_vllm("m", **kwargs)


def test_cli_wiring_with_a_stand_in_vllm(monkeypatch, tmp_path):
    """The command passes its options to vllm.LLM and writes what the engine reports."""
    seen = {}

    class FakeLLM:
        def __init__(self, **kwargs):
            seen.update(kwargs)
            self.llm_engine = v1_engine(blocks=500, block_size=16, util=kwargs.get("gpu_memory_utilization", 0.9),
                                        max_len=kwargs.get("max_model_len", 8192)).llm_engine

    monkeypatch.setitem(sys.modules, "vllm", NS(LLM=FakeLLM, __version__="stand-in"))
    monkeypatch.setattr(vp, "_runtime_info", lambda vllm: ("stand-in GPU", {"vllm": vllm.__version__}))
    monkeypatch.setattr(vp, "require_gpus", lambda tp: None)  # the stand-in engine needs no GPU
    out = tmp_path / "kv.jsonl"
    res = CliRunner().invoke(profile_cli, ["kv-probe", "--model", "org/m", "--tp", "2",
                                           "--gpu-memory-utilization", "0.8", "--max-model-len", "2048",
                                           "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert seen == {"model": "org/m", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.8, "max_model_len": 2048}
    assert "8000 tokens (500 blocks x 16 tokens)" in res.output
    [ob] = read_observations(out)
    assert ob.value == 8000 and ob.inputs["tp"] == 2 and ob.inputs["max_model_len"] == 2048
    assert ob.provenance["hardware"] == "stand-in GPU"


def test_refuses_without_enough_gpus_before_starting_an_engine(monkeypatch, tmp_path):
    """vLLM installed but no GPU (or fewer than --tp): a clear refusal naming what it needs, no engine."""
    started = []
    monkeypatch.setitem(sys.modules, "vllm", NS(LLM=lambda **kw: started.append(kw), __version__="stand-in"))
    no_gpu = NS(__version__="2.13.0+cpu", cuda=NS(is_available=lambda: False, device_count=lambda: 0))
    monkeypatch.setitem(sys.modules, "torch", no_gpu)
    with pytest.raises(MissingExtraError, match=r"tensor_parallel_size=1: it needs 1 CUDA GPU .*sees 0"):
        vp.probe_vllm("Qwen/Qwen3-8B")
    two = NS(__version__="2.13.0+cu128", cuda=NS(is_available=lambda: True, device_count=lambda: 2))
    monkeypatch.setitem(sys.modules, "torch", two)
    res = CliRunner().invoke(profile_cli, ["kv-probe", "--model", "Qwen/Qwen3-8B", "--tp", "4",
                                           "-o", str(tmp_path / "kv.jsonl")])
    assert res.exit_code == 2 and "needs 4 CUDA GPUs" in res.output and "sees 2" in res.output
    assert "third_party/install.sh" in res.output and not started
