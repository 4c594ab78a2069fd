"""Analytical and fixed training cost: scaling in tokens, pipeline bubble, LoRA, memory."""

import pytest

from simrl.cost.analytical import AnalyticalTraining, FixedTraining
from simrl.cost.base import CostModelError, OutOfDomainError, TrainingCost

BATCH = [1536] * 256  # 32 groups x 8 samples x 1.5k tokens


@pytest.fixture(scope="module")
def qwen8b():
    return AnalyticalTraining("qwen3-8b", "H100", gpus=8)


def test_is_a_training_cost(qwen8b):
    assert isinstance(qwen8b, TrainingCost)
    assert isinstance(FixedTraining(step_s=3.0), TrainingCost)


def test_step_time_is_plausible_for_8_h100(qwen8b):
    # 6 x 8.2e9 x 393k tokens x 4/3 (recompute) / (8 x 989e12 x 0.4) ~ 8 s.
    assert 6.0 < qwen8b.step_time(BATCH) < 11.0


def test_step_time_scales_linearly_in_tokens(qwen8b):
    fixed = qwen8b.step_time([1536] * 8)  # ~comm + optimizer + overhead
    t1 = qwen8b.step_time(BATCH) - fixed
    t2 = qwen8b.step_time(BATCH * 2) - fixed
    assert t2 / t1 == pytest.approx(2.0, rel=0.05)


def test_attention_makes_long_sequences_superlinear(qwen8b):
    short = qwen8b.step_time([1024] * 64)
    long = qwen8b.step_time([16384] * 4)  # same tokens, longer sequences
    assert long > short


def test_recompute_costs_a_third_more(qwen8b):
    no_ckpt = AnalyticalTraining("qwen3-8b", "H100", gpus=8, activation_checkpointing=False)
    assert qwen8b.step_time(BATCH) / no_ckpt.step_time(BATCH) == pytest.approx(4 / 3, rel=0.05)


def test_pipeline_adds_a_bubble_that_shrinks_with_more_micro_batches():
    pp1 = AnalyticalTraining("qwen3-8b", "H100", gpus=8)
    pp4 = AnalyticalTraining("qwen3-8b", "H100", gpus=8, pp=4)
    few, many = [1536] * 8, [1536] * 512
    assert pp4.step_time(few) > pp1.step_time(few)
    assert pp4.step_time(few) / pp1.step_time(few) > pp4.step_time(many) / pp1.step_time(many)


def test_lora_is_cheaper_than_full_fine_tuning(qwen8b):
    lora = AnalyticalTraining("qwen3-8b", "H100", gpus=8, lora_rank=32)
    assert lora.step_time(BATCH) < 0.85 * qwen8b.step_time(BATCH)
    assert lora.grad_sync_time() < qwen8b.grad_sync_time() / 50
    assert lora.optimizer_time() < qwen8b.optimizer_time() / 50
    assert lora.peak_memory_bytes(BATCH) < 0.5 * qwen8b.peak_memory_bytes(BATCH)


def test_zero_stages_shrink_memory(qwen8b):
    peaks = [AnalyticalTraining("qwen3-8b", "H100", gpus=16, tp=4, zero_stage=z).peak_memory_bytes(BATCH)
             for z in (0, 1, 2, 3)]
    assert peaks == sorted(peaks, reverse=True)


def test_peak_memory_fits_then_not(qwen8b):
    assert qwen8b.peak_memory_bytes(BATCH) < qwen8b.memory_capacity_bytes()
    fat = AnalyticalTraining("qwen3-8b", "H100", gpus=8, activation_checkpointing=False, micro_batch_size=4)
    assert fat.peak_memory_bytes([32768] * 32) > fat.memory_capacity_bytes()


def test_layout_that_cannot_hold_the_model_raises():
    with pytest.raises(CostModelError, match="does not fit"):
        AnalyticalTraining("llama-3.1-70b", "H100", gpus=8)
    AnalyticalTraining("llama-3.1-70b", "H100", gpus=16, tp=8, zero_stage=3)  # fits


def test_bad_layouts_raise():
    with pytest.raises(CostModelError, match="divisible"):
        AnalyticalTraining("qwen3-8b", "H100", gpus=8, tp=3)
    with pytest.raises(CostModelError, match="MoE"):
        AnalyticalTraining("qwen3-8b", "H100", gpus=8, ep=2)


def test_moe_trains_at_active_cost():
    moe = AnalyticalTraining("qwen3-30b-a3b", "H100", gpus=8, ep=8)
    dense = AnalyticalTraining("qwen3-32b", "H100", gpus=8, zero_stage=3)
    assert moe.step_time(BATCH) < dense.step_time(BATCH) / 3


def test_sequence_beyond_context_is_out_of_domain():
    t = AnalyticalTraining("qwen3-8b", "H100", gpus=8, strict=True)
    with pytest.raises(OutOfDomainError):
        t.step_time([100_000])


def test_fixed_training():
    f = FixedTraining(step_s=12.5)
    assert f.step_time(BATCH) == 12.5
    assert f.peak_memory_bytes(BATCH) < f.memory_capacity_bytes()
