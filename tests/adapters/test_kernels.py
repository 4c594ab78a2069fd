"""`srl-profile kernels`: layer shapes, the missing-torch error, and a real CPU run that the
kernel DB and `srl-regress fit --family composed` accept.

The real runs start a fresh interpreter: torch must never enter the pytest process, because
tests/test_core_imports.py asserts that no core package imported it (and CI has no torch, so
those tests skip there).
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from adapters.cli import cli as profile_cli
from adapters.extras import MissingExtraError
from adapters.kernels import (
    OPERATORS,
    layer_dims,
    operator_inputs,
    operator_observation,
    parse_tokens,
    profile_kernels,
    timing_stats,
)
from simrl.cli.regress import cli as regress_cli
from simrl.cost.base import CostModelError
from simrl.cost.kerneldb import KNOWN_OPS, LayerShape, fit_kernel_db, op_work
from simrl.cost.observations import read_observations

REPO = Path(__file__).resolve().parents[2]
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch not installed (the profile-torch extra)")


def test_operator_names_are_the_kernel_db_ones():
    assert set(OPERATORS) == set(KNOWN_OPS)


def test_phi2_layer_has_no_post_attention_norm():
    d = layer_dims("phi-2", 1)
    assert "post_attention_layernorm" not in d.operators and len(d.operators) == 9
    assert (d.qkv_out, d.attn_out_in, d.up_out, d.mlp_width) == (3 * 2560, 2560, 10240, 10240)


def test_gated_layer_widths_per_rank():
    d = layer_dims("meta-llama/Llama-3.1-8B", 2)
    assert d.operators == OPERATORS
    # 16 q heads + 2 * 4 kv heads of 128 per rank; gate and up stacked
    assert (d.qkv_out, d.attn_out_in, d.up_out, d.mlp_width) == ((16 + 8) * 128, 2048, 2 * 7168, 7168)
    assert d.vocab_rows == 128256 // 2


def test_inputs_match_the_kernel_db_shape():
    d = layer_dims("Qwen/Qwen3-32B", 4)  # head_dim 128 != hidden / heads = 80
    inputs = operator_inputs(d, 64, "bf16")
    shape = LayerShape.from_inputs(inputs)
    assert shape.hd == 128 and inputs["tp"] == 4 and inputs["model"] == "Qwen/Qwen3-32B"
    # The kernel DB's FLOPs of the QKV projection equal the GEMM the profiler runs.
    flops, _ = op_work("attn_pre_proj", shape, 64, 4)
    assert flops == 2 * 64 * d.hidden * d.qkv_out


@pytest.mark.parametrize("model, tp, match", [
    ("Qwen/Qwen3-30B-A3B", 1, "not a dense"),
    ("phi-2", 3, "split evenly"),
    ("phi-2", 0, "tp must be"),
])
def test_layer_dims_rejects(model, tp, match):
    with pytest.raises(ValueError, match=match):
        layer_dims(model, tp)


def test_unknown_model():
    with pytest.raises(CostModelError, match="unknown model"):
        layer_dims("no-such-model", 1)


def test_parse_tokens():
    assert parse_tokens("16, 1,4,4") == [1, 4, 16]
    for bad in ("", "0,1", "a,b"):
        with pytest.raises(ValueError, match="--tokens"):
            parse_tokens(bad)


def test_timing_stats_and_observation():
    stats = timing_stats([3e-6, 1e-6, 2e-6])
    assert stats["median"] == 2e-6 and stats["min"] == 1e-6 and stats["max"] == 3e-6
    assert stats["mean"] == pytest.approx(2e-6) and stats["std"] == pytest.approx((2 / 3) ** 0.5 * 1e-6)
    prov = {"hardware": "test", "source": "unit test", "date": "unknown"}
    ob = operator_observation(layer_dims("phi-2", 1), "add", 8, [3e-6, 1e-6, 2e-6], prov, "bf16", 2)
    assert (ob.kind, ob.name, ob.value, ob.unit) == ("operator", "add", 2e-6, "s")
    assert ob.spread == pytest.approx(stats["std"])
    assert ob.provenance["timing"]["repeats"] == 3 and ob.provenance["timing"]["warmup"] == 2
    assert "timing" not in prov  # the caller's provenance is not mutated
    with pytest.raises(ValueError, match="no timed repeats"):
        timing_stats([])


def test_missing_torch_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(MissingExtraError, match=r"profile-torch.*simrl\[profile-torch\]"):
        profile_kernels("phi-2", tokens=[1], device="cpu")
    res = CliRunner().invoke(profile_cli, ["kernels", "--model", "phi-2", "--device", "cpu",
                                           "-o", str(tmp_path / "k.jsonl")])
    assert res.exit_code == 2 and "profile-torch" in res.output
    assert not (tmp_path / "k.jsonl").exists()


def test_cli_rejects_bad_arguments_before_touching_torch(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    out = str(tmp_path / "k.jsonl")
    for args, msg in ((["--model", "nope"], "unknown model"), (["--model", "phi-2", "--tp", "3"], "split evenly"),
                      (["--model", "phi-2", "--tokens", "0"], "--tokens"),
                      (["--model", "phi-2", "--ops", "attn"], "operators not in this layer")):
        res = CliRunner().invoke(profile_cli, ["kernels", *args, "-o", out])
        assert res.exit_code == 2 and msg in res.output, res.output


def _run_profiler(*args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "adapters.cli", "kernels", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


@pytest.fixture(scope="module")
def phi2_obs(tmp_path_factory):
    if not HAS_TORCH:
        pytest.skip("torch not installed (the profile-torch extra)")
    out = tmp_path_factory.mktemp("kernels") / "phi2.jsonl"
    res = _run_profiler("--model", "phi-2", "--device", "cpu", "--tokens", "1,8,32", "--repeats", "2",
                        "--warmup", "1", "--threads", "1", "--quiet", "-o", str(out))
    assert "wrote 27 operator observations" in res.stdout
    return out, read_observations(out)


@needs_torch
def test_cpu_run_records_valid_observations(phi2_obs):
    _, obs = phi2_obs
    assert len(obs) == 9 * 3
    assert {o.name for o in obs} == set(layer_dims("phi-2", 1).operators)
    for o in obs:
        t = o.provenance["timing"]
        assert o.value == t["median"] > 0 and t["min"] <= t["median"] <= t["max"] and o.spread == t["std"]
        assert t["repeats"] == 2 and t["warmup"] == 1
        assert o.inputs["n_embd"] == 2560 and o.inputs["use_gated_mlp"] is False and o.inputs["dtype"] == "bf16"
        assert o.provenance["software"]["torch"] and o.provenance["software"]["threads"] == 1
        assert o.provenance["hardware"].endswith("(CPU)") and o.provenance["date"] != "unknown"
    assert sorted({o.inputs["num_tokens"] for o in obs}) == [1, 8, 32]


@needs_torch
def test_cpu_run_fits_the_kernel_db(phi2_obs):
    path, obs = phi2_obs
    db = fit_kernel_db(obs)
    assert set(db.coefficients) == {o.name for o in obs}
    shape = LayerShape.from_inputs(obs[0].inputs)
    assert db.predict("mlp_up_proj", shape, 8, 1) == pytest.approx(
        next(o.value for o in obs if o.name == "mlp_up_proj" and o.inputs["num_tokens"] == 8))
    assert db.predict_physics("mlp_up_proj", shape, 16, 1) > 0
    art = path.parent / "composed.json"
    res = CliRunner().invoke(regress_cli, ["fit", "--family", "composed", "--obs", str(path), "-o", str(art)])
    assert res.exit_code == 0, res.output
    assert "family composed from 27 observations" in res.output and art.exists()


@needs_torch
def test_cpu_run_gated_model_subset_fp32(tmp_path):
    out = tmp_path / "llama.jsonl"
    _run_profiler("--model", "llama-2-7b", "--tp", "2", "--device", "cpu", "--tokens", "1,4", "--repeats", "2",
                  "--warmup", "0", "--dtype", "fp32", "--ops", "post_attention_layernorm,attn_rope,mlp_act,add",
                  "--quiet", "-o", str(out))
    obs = read_observations(out)
    assert sorted((o.name, o.inputs["num_tokens"]) for o in obs) == sorted(
        (op, t) for op in ("post_attention_layernorm", "attn_rope", "mlp_act", "add") for t in (1, 4))
    assert all(o.inputs["tp"] == 2 and o.inputs["dtype"] == "fp32" and o.inputs["use_gated_mlp"] for o in obs)


def test_operator_details_hand_checked():
    from adapters.kernels import layer_dims, operator_details

    d = operator_details(layer_dims("meta-llama/Llama-2-7b-hf", 1), "mlp_down_proj", 2, "bf16")
    # [2, 11008] x [11008, 4096]: 2*2*11008*4096 FLOPs; bf16 bytes 2*(2*11008 + 11008*4096 + 2*4096).
    assert d["flops"] == 180_355_072 and d["bytes"] == 90_237_952
    assert d["shapes"] == {"input": [2, 11008], "weight": [4096, 11008]}
    up = operator_details(layer_dims("meta-llama/Llama-2-7b-hf", 2), "mlp_up_proj", 1, "fp32")
    assert up["shapes"]["weight"] == [11008, 4096]  # gate and up stacked, 2 x 11008 / TP 2


def test_cuda_event_timing_path_with_a_stand_in_torch():
    """time_call's CUDA branch: warm-up untimed, one event pair per repeat, one synchronize before
    reading, elapsed_time (ms) converted to seconds. A stand-in records the order of calls."""
    import types

    from adapters.kernels import time_call

    log = []

    class Event:
        n = 0

        def __init__(self, enable_timing):
            assert enable_timing
            Event.n += 1
            self.i = Event.n

        def record(self):
            log.append(("record", self.i))

        def elapsed_time(self, end):
            return 2.0 * (end.i - self.i)  # ms

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=Event, synchronize=lambda dev: log.append(("sync",))))
    calls = []
    times = time_call(fake, lambda: calls.append(1), types.SimpleNamespace(type="cuda"), warmup=2, repeats=3)
    assert times == [0.002, 0.002, 0.002] and len(calls) == 5
    assert log[0] == ("sync",) and log[-1] == ("sync",)
    assert [x for x in log if x[0] == "record"] == [("record", i) for i in range(1, 7)]


def test_cuda_without_a_gpu_is_refused_naming_what_it_needs():
    import types

    from adapters.kernels import resolve_device

    cpu_torch = types.SimpleNamespace(__version__="2.13.0+cpu", cuda=types.SimpleNamespace(is_available=lambda: False),
                                      device=lambda d: ("device", d))
    with pytest.raises(ValueError, match=r"--device cuda:1: the CUDA-event timing path needs an NVIDIA GPU and a "
                                         r"CUDA build of torch; torch 2.13.0\+cpu sees no CUDA device. Use --device cpu"):
        resolve_device(cpu_torch, "cuda:1")
    assert resolve_device(cpu_torch, "auto") == ("device", "cpu")  # auto falls back to the CPU timer
