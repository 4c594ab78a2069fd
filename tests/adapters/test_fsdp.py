"""`srl-profile fsdp`: the pure parts always; a real gloo run on the CPU whenever torch is installed."""

import importlib.util
import json

import numpy as np
import pytest
from click.testing import CliRunner

from adapters import fsdp
from adapters.cli import cli
from adapters.extras import MissingExtraError
from simrl.cli.regress import cli as regress_cli
from simrl.cost.architectures import model_arch
from simrl.cost.observations import read_observations

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch not installed (the profile-torch extra)")
PROV = {"hardware": "test CPU", "source": "test", "date": "2026-01-01"}


def test_plan_validation_names_the_option():
    ok = fsdp.FsdpPlan()
    assert fsdp.validate_plan(ok).name == "simrl/tiny-llama"
    for bad, match in [
        (dict(world_sizes=()), "--world-sizes"),
        (dict(seq_lens=(0,)), "--seq-lens"),
        (dict(seq_lens=(10**6,)), "max_position"),
        (dict(shardings=("zero9",)), "--sharding"),
        (dict(steps=0), "--steps"),
        (dict(device="tpu"), "--device"),
        (dict(device="cuda", clock="process"), "--clock process"),
        (dict(device="cuda", start_method="fork"), "fork"),
        (dict(model="Qwen/Qwen3-30B-A3B"), "dense"),
    ]:
        with pytest.raises(ValueError, match=match):
            fsdp.validate_plan(fsdp.FsdpPlan(**bad))
    assert fsdp.parse_ints("4,1,2,2", "--x") == (1, 2, 4)
    with pytest.raises(ValueError, match="--x"):
        fsdp.parse_ints("1,a", "--x")


def test_point_observations_take_the_slowest_rank_per_step():
    plan = fsdp.FsdpPlan(steps=3, shardings=("grad-op",))
    arch = model_arch(plan.model)
    ranks = [{"wall": [0.1, 0.3, 0.2], "process": [0.1, 0.1, 0.1], "peak_bytes": 1000},
             {"wall": [0.2, 0.1, 0.25], "process": [0.1, 0.2, 0.1], "peak_bytes": 3000}]
    t, m = fsdp.point_observations(plan, arch, 2, "grad-op", 64, ranks, PROV)
    # Slowest rank per step: [0.2, 0.3, 0.25] -> median 0.25, population std sqrt(((-.05)^2+.05^2+0)/3) = 0.0408.
    assert t.value == pytest.approx(0.25) and t.spread == pytest.approx(0.040825, rel=1e-4)
    assert t.provenance["timing"]["process"]["median"] == pytest.approx(0.1)  # max(.1,.1), max(.1,.2), .1
    assert m.unit == "bytes" and m.value == 3000 and m.provenance["memory"]["per_rank_bytes"] == [1000, 3000]
    i = t.inputs
    assert i["seq_lens"] == [64, 64] and i["dp"] == 2 and i["tp"] == 1 and i["pp"] == 1
    assert i["zero_stage"] == 2 and i["reshard_after_forward"] is False and i["backend"] == "gloo"
    with pytest.raises(ValueError, match="expected 2 rank records"):
        fsdp.point_observations(plan, arch, 2, "grad-op", 64, ranks[:1], PROV)
    with pytest.raises(ValueError, match="read 0"):
        fsdp.point_observations(plan, arch, 1, "full", 64, [{**ranks[0], "wall": [0.0, 0.1, 0.1]}], PROV)


def test_missing_torch_names_the_extra(monkeypatch):
    def missing(*a, **k):
        raise MissingExtraError("srl-profile fsdp needs torch ...: pip install 'simrl[profile-torch]'")

    monkeypatch.setattr(fsdp, "require_torch", missing)
    r = CliRunner().invoke(cli, ["fsdp", "-o", "x.jsonl"])
    assert r.exit_code == 2 and "profile-torch" in r.output


@needs_torch
def test_model_matches_the_registered_architecture():
    import torch

    arch = model_arch("simrl/tiny-llama")
    model = fsdp.build_model(torch, arch)
    # Built in code, its parameters are exactly the architecture's count (5,245,184: 4 layers of
    # 196,608 attention + 589,824 MLP + 512 norm weights, 2 x 4096 x 256 embedding/LM head, final norm).
    assert fsdp.count_params(model) == arch.total_params == 5_245_184
    logits = model(torch.randint(0, arch.vocab, (2, 16)))
    assert logits.shape == (2, 16, arch.vocab)


@needs_torch
def test_cuda_is_refused_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="sees no CUDA device"):
        fsdp.profile_fsdp(fsdp.FsdpPlan(device="cuda", clock="wall"))


@needs_torch
def test_real_gloo_run_writes_observations_the_fsdp_family_fits(tmp_path):
    out = tmp_path / "fsdp.jsonl"
    r = CliRunner().invoke(cli, ["fsdp", "--world-sizes", "1,2", "--seq-lens", "32,256", "--steps", "2",
                                 "--clock", "process", "--start-method", "fork", "-o", str(out)])
    assert r.exit_code == 0, r.output
    obs = read_observations(out)
    assert len(obs) == 8  # 2 worlds x 2 lengths x (time, memory)
    times = {(o.inputs["dp"], o.inputs["seq_lens"][0]): o.value for o in obs if o.unit == "s"}
    assert times[(1, 256)] > times[(1, 32)] > 0  # 8x the tokens costs more
    assert times[(2, 32)] > times[(1, 32)]  # the same per-rank work plus gloo's all-gathers
    mem = [o for o in obs if o.unit == "bytes"]
    assert all(o.value > 5_245_184 * 16 for o in mem)  # at least the unsharded fp32 model + Adam state
    p = obs[0].provenance
    assert p["software"]["torch"] and p["software"]["backend"] == "gloo" and p["software"]["simrl_commit"]
    assert p["driver"] and p["date"] and "(CPU)" in p["hardware"]
    art = tmp_path / "fsdp.json"
    r = CliRunner().invoke(regress_cli, ["fit", "--family", "fsdp", "--obs", str(out), "--gpu", "H100",
                                         "-o", str(art)])
    assert r.exit_code == 0, r.output
    coefs = json.loads(art.read_text())["coefficients"]
    assert len(coefs["time"]) == 4 and len(coefs["memory"]) == 4
    assert np.all(np.asarray(coefs["time"]) >= 0)


@needs_torch
@pytest.mark.slow
def test_fit_predicts_held_out_world_sizes_and_lengths():
    """The Done-when figure: fit on a 4x5 grid minus world 3 and seq_len 128, predict those."""
    import benchmarks.fsdp_profile as bench

    obs = bench.profile(steps=3)
    res = bench.heldout(obs, (3,), (128,))
    assert res["n_test"] == 16
    assert res["time"]["median_ape"] < 10.0, res["time"]
    assert res["memory"]["median_ape"] < 10.0, res["memory"]
