"""The fsdp training family's features, pinned by hand for tiny cases, and how it finds the hardware."""

import numpy as np
import pytest

from simrl.cost.architectures import model_arch
from simrl.cost.base import CostModelError
from simrl.cost.fit_training import (
    TrainingLayout,
    fsdp_comm_bytes,
    layout_from_inputs,
    memory_features,
    time_features,
)
from simrl.cost.hardware import gpu_spec

TINY = model_arch("simrl/tiny-llama")  # 5,245,184 parameters (P)
P = 5_245_184


def test_gloo_cpu_features_by_hand():
    # dp=2, ZeRO-3, fp32 parameters and gradients, gloo, one 32-token sequence per rank, the CPU entry
    # (96 GFLOP/s, 25.6 GB/s memory and link).
    lay = TrainingLayout(arch=TINY, gpu=gpu_spec("cpu"), dp=2, zero_stage=3, activation_checkpointing=False,
                         backend="gloo", param_bytes=4, reduce_bytes=4)
    f = time_features("fsdp", [32, 32], lay)
    # compute: matmul params 4,194,304 (4 layers x 786,432 + LM head 1,048,576); forward FLOPs per token at
    # context 16 = 2 x 4,194,304 + 2 x 4 layers x 4 heads x (64 + 64) x 16 = 8,454,144; x 3 (fwd + bwd)
    # x 64 tokens = 1,623,195,648 FLOPs over 2 ranks x 96e9 = 8.454144e-3 s.
    # wire: 2 all-gathers of 4P + gloo's reduce-scatter = an all-reduce of 4P (x 2), times (n-1)/n = 1/2:
    # (8P + 8P) / 2 = 8P = 41,961,472 B / 25.6e9 = 1.639120e-3 s.
    # staging: 2 x 4P copied out + 4P copied in = 12P = 62,942,208 B / 25.6e9 = 2.458680e-3 s.
    # optimizer: 16 B x P / 2 ranks = 41,961,472 B / 25.6e9 = 1.639120e-3 s.
    # ring hops: 5 FSDP units (4 layers + root) x 3 collectives x (2 - 1) = 15.
    want = [1.0, 8.454144e-3, 1.639120e-3, 2.458680e-3, 1.639120e-3, 15.0, -1.639120e-3]
    assert f == pytest.approx(want, rel=1e-6)


def test_nccl_zero2_and_world_one_by_hand():
    # NCCL, bf16 parameters (2 B) and fp32 reduction (4 B), ZeRO-2 (one all-gather), dp=4:
    # wire = (1 x 2P + 1 x 4P) x 3/4 = 4.5P; staged = 2P + 4P = 6P.
    lay = TrainingLayout(arch=TINY, gpu=gpu_spec("H100"), dp=4, zero_stage=2)
    assert fsdp_comm_bytes(lay) == pytest.approx((4.5 * P, 6 * P))
    # ZeRO-3 on NCCL: a ring reduce-scatter, not an all-reduce: (2 x 2P + 4P) x 3/4 = 6P.
    assert fsdp_comm_bytes(attrs_evolve(lay, zero_stage=3))[0] == pytest.approx(6 * P)
    # One rank: no collectives, no copies, no hops; the optimizer sweeps every state byte.
    one = attrs_evolve(lay, dp=1)
    f = time_features("fsdp", [128], one)
    assert fsdp_comm_bytes(one) == (0.0, 0.0) and f[3] == f[4] == f[5] == f[6] == 0.0
    assert f[2] == pytest.approx(16 * P / 3.35e12)
    # Memory: ZeRO-2 keeps 2 B + 14 B / dp of state per parameter: (2 + 3.5) / 16 x 16P = 5.5P.
    m = memory_features("fsdp", [128], lay)
    assert m[1] == pytest.approx(5.5 * P)


def attrs_evolve(lay, **kw):
    import attrs

    return attrs.evolve(lay, **kw)


def test_cpu_observations_need_no_gpu_option():
    inputs = {"tp": 1, "pp": 1, "dp": 2, "model": "simrl/tiny-llama", "device": "cpu", "backend": "gloo",
              "dtype": "fp32", "zero_stage": 3}
    lay = layout_from_inputs(inputs, {"hardware": "AMD EPYC 7763 64-Core Processor (CPU)"}, None, None)
    assert lay.gpu.name == "CPU" and lay.backend == "gloo" and lay.param_bytes == 4
    no_device = {k: v for k, v in inputs.items() if k != "device"}
    assert layout_from_inputs(no_device, {"hardware": "Intel Xeon (CPU)"}, None, None).gpu.name == "CPU"
    # A GPU observation resolves its provenance name; an explicit --gpu wins over both.
    gpu_inputs = {**no_device, "backend": "nccl", "dtype": "bf16"}
    assert layout_from_inputs(gpu_inputs, {"hardware": "NVIDIA H100 80GB HBM3"}, None, None).gpu.name == "H100"
    assert layout_from_inputs(inputs, {"hardware": "x (CPU)"}, None, "H200").gpu.name == "H200"
    with pytest.raises(CostModelError, match="inputs.dtype"):
        layout_from_inputs({**inputs, "dtype": "int3"}, {}, None, None)
    with pytest.raises(CostModelError, match="names no hardware"):
        layout_from_inputs(no_device, {}, None, None)


def test_features_are_finite_and_grow_with_tokens():
    lay = TrainingLayout(arch=TINY, gpu=gpu_spec("cpu"), dp=3, zero_stage=3, backend="gloo", param_bytes=4)
    a, b = time_features("fsdp", [64] * 3, lay), time_features("fsdp", [512] * 3, lay)
    assert np.all(np.isfinite(a)) and b[1] > a[1] and np.array_equal(a[2:6], b[2:6])


def test_an_artifact_fitted_on_cpu_observations_knows_its_hardware():
    """A run on another GPU is then warned (`check_gpu`) that the fit carries CPU behaviour."""
    from simrl.cost.family import fitted_gpu

    assert fitted_gpu({"provenance": {"hardware": ["AMD EPYC 7763 64-Core Processor (CPU)"]}}) == "CPU"
    assert fitted_gpu({"provenance": {"hardware": ["NVIDIA H100 80GB HBM3"]}}) == "H100"
    assert fitted_gpu({"provenance": {"hardware": ["x (CPU)", "NVIDIA H100 80GB HBM3"]}}) is None  # mixed
