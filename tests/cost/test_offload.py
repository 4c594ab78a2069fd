"""Trainer offload (simrl.cost.offload): host <-> GPU copies and the CPU optimizer, by hand."""

import pytest

from simrl.cost.analytical import AnalyticalTraining
from simrl.cost.offload import TrainerOffload


def test_trainer_offload_formulas_by_hand():
    off = TrainerOffload(host_bytes_per_s=50e9, param_bytes=10e9, optimizer_params=1e9, param_offload=True,
                         optimizer_offload=True, optimizer_cpu_offload=True, optimizer_offload_fraction=0.5,
                         cpu_optimizer_bytes_per_s=20e9)
    # offload: params in and out around 2 actor phases + 1 reference forward: 2 x 10e9 x 3 = 60e9 B;
    # the GPU half of the optimizer shard in and out: 2 x 1e9 x 0.5 x 12 = 12e9 B; 72e9 / 50e9 = 1.44 s.
    assert off.transfer_s(actor_phases=2, ref_forwards=1) == pytest.approx(1.44)
    # CPU optimizer on 0.5e9 params: fp32 grads out + params back 0.5e9 x 8 / 50e9 = 0.08 s;
    # AdamW through host memory 0.5e9 x 28 / 20e9 = 0.7 s; 0.78 s.
    assert off.cpu_optimizer_s() == pytest.approx(0.78)
    none = TrainerOffload(host_bytes_per_s=50e9, param_bytes=10e9, optimizer_params=1e9)
    assert none.transfer_s(2, 1) == 0 and none.cpu_optimizer_s() == 0


def test_analytical_training_reports_offload_phases_by_hand():
    # Qwen3-8B (8,190,735,360 params) on 8 H100, TP 1, ZeRO-1 over 8 ranks; host link 64 GB/s x 0.8.
    kw = dict(gpus=8, reference_model=True, recompute_old_logprob=True)
    base = AnalyticalTraining("qwen3-8b", "H100", **kw)
    off = AnalyticalTraining("qwen3-8b", "H100", **kw, param_offload=True, optimizer_offload=True,
                             optimizer_cpu_offload=True, optimizer_offload_fraction=0.5)
    seqs = [1000] * 64
    ph = off.phases(seqs)
    # offload: params 16,381,470,720 B x 2 x (old_log_prob + update + ref forward = 3) = 98,288,824,320 B,
    # + the GPU half of the optimizer shard 2 x 1,023,841,920 x 0.5 x 12 = 12,286,103,040 B;
    # 110,574,927,360 / 51.2e9 = 2.15966655 s.
    assert ph["offload"] == pytest.approx(2.15966655)
    # CPU half of the shard, 511,920,960 params: x 8 / 51.2e9 = 0.0799877 s + x 28 / 20e9 = 0.7166893 s.
    assert ph["cpu_optimizer"] == pytest.approx(0.796676994)
    assert ph["optimizer"] == pytest.approx(base.optimizer_time() / 2)
    assert off.step_time(seqs) == pytest.approx(sum(ph.values()))
    assert off.step_time(seqs) - base.step_time(seqs) == pytest.approx(
        2.15966655 + 0.796676994 - base.optimizer_time() / 2)
    # The CPU part's Adam states (1,023,841,920 x 12 x 0.5 B) leave the GPU.
    assert base.peak_memory_bytes([]) - off.peak_memory_bytes([]) == pytest.approx(6_143_051_520)
    # Without offload knobs the phases are the usual ones (no new keys).
    assert "offload" not in base.phases(seqs) and "cpu_optimizer" not in base.phases(seqs)


def test_offload_knobs_come_from_training_knobs():
    from simrl.config import load_config
    from simrl.cost.build import build_costs

    cfg = load_config(None, ["cost.training_knobs.param_offload=true",
                             "cost.training_knobs.optimizer_offload_fraction=0.25"])
    t = build_costs(cfg).training
    assert t.param_offload and t.optimizer_offload_fraction == 0.25
    with pytest.raises(ValueError, match="optimizer_offload_fraction"):
        build_costs(load_config(None, ["cost.training_knobs.optimizer_offload_fraction=1.5"]))
