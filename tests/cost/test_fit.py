"""Every family fits synthetic observations generated from known coefficients and recovers them."""

import numpy as np
import pytest

from simrl.config import load_config
from simrl.cost.architectures import model_arch
from simrl.cost.artifact import write_artifact
from simrl.cost.base import OutOfDomainError
from simrl.cost.fit import fit_artifact
from simrl.cost.fit_training import TrainingLayout, memory_features, time_features
from simrl.cost.hardware import gpu_spec
from simrl.cost.observations import make
from simrl.cost.registry import family


def build_rollout(art, cfg):
    return family("rollout", art["family"]).build(art, cfg)


def build_training(art, cfg):
    return family("training", art["family"]).build(art, cfg)


def build_weight_sync(art, cfg):
    return family("weight_sync", art["family"]).build(art, cfg)

PROV = {"hardware": "H100", "source": "synthetic", "date": "2026-01-01"}
RNG = np.random.default_rng(0)


def iterations(fn, n=60):
    out = []
    for _ in range(n):
        b, kv, p = int(RNG.integers(0, 256)), int(RNG.integers(0, 200_000)), int(RNG.choice([0, 0, 128, 512, 1024, 2048, 4096]))
        if b == 0 and p == 0:
            b = 1
        out.append(make("iteration", fn(b, kv, p), "s", {"batch_size": b, "kv_tokens": kv, "prefill_tokens": p}, PROV))
    return out


def test_psrl_recovers_coefficients():
    true = (4e-3, 3e-5, 2e-8, 6e-5)
    art = fit_artifact("psrl", iterations(lambda b, kv, p: true[0] + true[1] * b + true[2] * kv + true[3] * p))
    got = [art["coefficients"][k] for k in ("a_s", "b_s_per_seq", "c_s_per_kv_token", "d_s_per_prefill_token")]
    assert np.allclose(got, true, rtol=1e-6)
    assert art["fit_quality"]["training"]["overall"]["max_ape"] < 1e-6


def test_distserve_recovers_piecewise_coefficients():
    def fn(b, kv, p):
        t = (2e-3 + 5e-5 * p + 1e-8 * p * p) if p else 0.0
        if b:
            t += (3e-3 + 1e-8 * kv + 2e-5 * b) if b < 64 else (5e-3 + 1.5e-8 * kv + 1e-5 * b)
        return t
    art = fit_artifact("distserve", iterations(fn, 120))
    c = art["coefficients"]
    assert c["prefill_c_s_per_token2"] == pytest.approx(1e-8, rel=1e-4)
    assert c["decode_hi_a_s"] == pytest.approx(5e-3, rel=1e-3)
    assert art["fit_quality"]["training"]["overall"]["max_ape"] < 0.1


def _training_obs(family, coefs_time, coefs_mem, layouts):
    out = []
    for lay in layouts:
        for _ in range(24):
            seqs = [int(x) for x in RNG.integers(20, 8000, size=int(RNG.integers(1, 64)))]
            inputs = {"seq_lens": seqs, "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "model": "qwen3-8b",
                      "zero_stage": lay.zero_stage, "activation_checkpointing": lay.activation_checkpointing}
            out.append(make("training_step", float(time_features(family, seqs, lay) @ coefs_time), "s", inputs, PROV))
            out.append(make("training_step", float(memory_features(family, seqs, lay) @ coefs_mem), "bytes",
                            inputs, PROV))
    return out


LAY = dict(arch=model_arch("qwen3-8b"), gpu=gpu_spec("H100"))


@pytest.mark.parametrize("family, t, m, layouts", [
    ("fixed", [12.0], [30e9, 0.0], [TrainingLayout(**LAY, dp=8)]),
    ("linear", [2.0, 3e-5], [20e9, 1e6], [TrainingLayout(**LAY, dp=8)]),
    ("analytical", [1.5, 1 / 0.42], [20e9, 1e6], [TrainingLayout(**LAY, dp=8)]),
    ("hydraulis", [1e-8, 2e-4, 0.05], [10e9, 2e6, 40e9],
     [TrainingLayout(**LAY, tp=2, pp=2, dp=2, zero_stage=z) for z in (1, 3)]),
    # fsdp: a, 1/MFU, optimizer, staging, 1/link efficiency, s per ring hop, overlap. Five DP degrees
    # (one across nodes) tell the DP terms apart: constant, 1/dp, dp > 1, (dp-1)/dp / link, dp - 1.
    ("fsdp", [1.0, 2.2, 1.3, 0.8, 1.5, 2e-4, 0.6], [5e9, 1.0, 34.0, 2.0],
     [TrainingLayout(**LAY, dp=d, zero_stage=3, activation_checkpointing=c) for d in (1, 2, 4, 8, 16)
      for c in (True, False)]),
])
def test_training_families_recover_coefficients(family, t, m, layouts, tmp_path):
    art = fit_artifact(family, _training_obs(family, np.array(t), np.array(m), layouts))
    write_artifact(tmp_path / "a.json", art)  # the validity domain is written as [lo, hi] lists
    c = art["coefficients"]["strategies"]["tp2_pp2"] if family == "hydraulis" else art["coefficients"]
    assert np.allclose(c["time"], t, rtol=1e-3)
    assert np.allclose(c["memory"], m, rtol=1e-3, atol=1e-6 * max(m))
    cfg = load_config(overrides=[f"deployment.training.tp={layouts[0].tp}", f"deployment.training.pp={layouts[0].pp}",
                                 f"deployment.training.gpus={layouts[0].gpus}"])
    model = build_training(art, cfg)
    assert model.step_time([1000] * 16) > 0


def test_weight_sync_recovers_bandwidth_and_latency():
    obs = []
    for b in (1e9, 4e9, 16e9):
        for n in (1, 2, 4):
            for k in (1, 8, 32):
                obs.append(make("weight_sync", 2e-3 * k + b / 40e9 + (n - 1) * b / 200e9, "s",
                                {"bytes": b, "n_instances": n, "buckets": k}, PROV))
    art = fit_artifact("weight_sync", obs)
    c = art["coefficients"]
    assert c["bytes_per_s"] == pytest.approx(40e9, rel=1e-6)
    assert c["latency_s_per_bucket"] == pytest.approx(2e-3, rel=1e-6)
    assert c["fanout_bytes_per_s"] == pytest.approx(200e9, rel=1e-6)
    ws = build_weight_sync(art, load_config(overrides=["deployment.model=qwen3-8b"]))
    assert ws.publish_time(2) > 0


def test_out_of_domain_queries_are_counted_and_strict_raises():
    art = fit_artifact("psrl", iterations(lambda b, kv, p: 1e-3 + 1e-5 * b + 1e-9 * kv + 1e-5 * p))
    model = build_rollout(art, load_config())
    with pytest.warns(UserWarning, match="outside validity domain"):
        model.iteration_time(10_000, 50_000, 0)
    model.iteration_time(20_000, 50_000, 0)
    assert model.domain.counts == {"batch_size": 2}
    strict = build_rollout(art, load_config(overrides=["cost.strict=true"]))
    with pytest.raises(OutOfDomainError):
        strict.iteration_time(10_000, 50_000, 0)
