"""Analytical and fixed training cost: scaling in tokens, pipeline bubble, LoRA, memory."""

import pytest

from simrl.cost.analytical import AnalyticalTraining, FixedTraining
from simrl.cost.architectures import model_arch
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
    # the active FLOPs are a tenth of the dense 32B's; with MoE's memory-bound passes and the alltoall
    # dispatcher's EP exchange the step is still well under half the dense one (Megatron-Bridge's H100
    # tables: 5,113 tokens/s/GPU for Qwen3-30B-A3B with the alltoall dispatcher, 9,058 with flex, 1,621 for
    # Llama3-70B); the flex dispatcher (fewer copies, at the link's rate) is faster still
    moe = AnalyticalTraining("qwen3-30b-a3b", "H100", gpus=8, ep=8)
    dense = AnalyticalTraining("qwen3-32b", "H100", gpus=8, zero_stage=3)
    assert moe.step_time(BATCH) < dense.step_time(BATCH) / 2
    flex = AnalyticalTraining("qwen3-30b-a3b", "H100", gpus=8, ep=8, moe_token_dispatcher_type="flex")
    assert flex.step_time(BATCH) < moe.step_time(BATCH) < dense.step_time(BATCH) / 3


def test_sequence_beyond_context_is_out_of_domain():
    t = AnalyticalTraining("qwen3-8b", "H100", gpus=8, strict=True)
    with pytest.raises(OutOfDomainError):
        t.step_time([100_000])


def test_fixed_training():
    f = FixedTraining(step_s=12.5)
    assert f.step_time(BATCH) == 12.5
    assert f.peak_memory_bytes(BATCH) < f.memory_capacity_bytes()


# -- phases -----------------------------------------------------------------------------------------

# Qwen3-8B: 8,190,735,360 params; matmul params 7,568,106,496 (total - embedding 151936 x 4096 -
# 73 RMSNorms x 4096). Forward FLOPs per token at mean causal context 1024: 2 x 7,568,106,496 +
# 4 x 36 x 32 x 128 x 1024 = 15,740,192,768.
F_1024 = 2 * 7_568_106_496 + 4 * 36 * 32 * 128 * 1024
SEQS = [2048] * 8


def test_phases_by_hand_grpo_with_old_logprob_and_reference():
    from simrl.cost.analytical import AnalyticalTraining

    t = AnalyticalTraining("qwen3-8b", "H100", gpus=8, recompute_old_logprob=True, reference_model=True)
    ph = t.phases(SEQS)
    # dp = 8: one 2048-token sample per rank; one forward = 2048 x F / (989e12 x 0.4) = 0.0814861 s.
    unit = 2048 * F_1024 / (989e12 * 0.4)
    assert unit == pytest.approx(0.0814861, abs=1e-7)
    assert ph["old_log_prob"] == pytest.approx(unit) and ph["ref_forward"] == pytest.approx(unit)
    assert ph["actor_update"] == pytest.approx(4 * unit)  # forward + backward (2) + recompute
    # ZeRO-1 over 8 GPUs (NVLink 450 GB/s x 0.7): reduce-scatter fp32 grads + all-gather bf16 params,
    # 7/8 x 8,190,735,360 x (4 + 2) B / 315e9 = 0.136513 s.
    assert ph["grad_sync"] == pytest.approx(7 / 8 * 8_190_735_360 * 6 / 315e9)
    # Adam on 1/8 of the parameters, 30 B each through HBM at 3.35e12 x 0.7: 0.0130981 s.
    assert ph["optimizer"] == pytest.approx(8_190_735_360 / 8 * 30 / (3.35e12 * 0.7))
    assert ph["overhead"] == 0.2 and ph["pipeline_bubble"] == 0 and ph["critic_update"] == 0
    assert sum(ph.values()) == pytest.approx(t.step_time(SEQS), rel=1e-12)
    # The default (no recompute, no reference) keeps its step time: 2 fewer forwards.
    base = AnalyticalTraining("qwen3-8b", "H100", gpus=8)
    assert t.step_time(SEQS) - base.step_time(SEQS) == pytest.approx(2 * unit)
    assert list(base.phases(SEQS)) == ["old_log_prob", "ref_forward", "log_prob_forwards", "critic_update",
                                       "actor_update", "pipeline_bubble", "grad_sync", "optimizer", "overhead"]


def test_ppo_critic_phase_by_hand():
    from simrl.cost.analytical import AnalyticalTraining

    t = AnalyticalTraining("qwen3-8b", "H100", gpus=8, critic=True)
    ph = t.phases(SEQS)
    unit = 2048 * F_1024 / (989e12 * 0.4)
    # Value forward + forward/backward/recompute of a same-size critic, its ZeRO-1 sync and Adam step.
    expected = 5 * unit + 7 / 8 * 8_190_735_360 * 6 / 315e9 + 8_190_735_360 / 8 * 30 / (3.35e12 * 0.7)
    assert ph["critic_update"] == pytest.approx(expected)
    assert sum(ph.values()) == pytest.approx(t.step_time(SEQS), rel=1e-12)


def test_pipeline_bubble_phase_by_hand():
    from simrl.cost.analytical import AnalyticalTraining

    # pp=2 on 8 GPUs: dp=4, 8 samples -> m = 2 micro-batches per rank, stretch (pp-1)/m = 0.5.
    t = AnalyticalTraining("qwen3-8b", "H100", gpus=8, pp=2)
    ph = t.phases(SEQS)
    unit = 2 * 2048 * F_1024 / (2 * 989e12 * 0.4)  # two samples per rank, half the layers
    assert ph["pipeline_bubble"] == pytest.approx(4 * unit * 0.5)
    # Each pass sends the rank's activations once across the stage boundary:
    # 4096 tokens x 4096 x 2 B = 33,554,432 B over NVLink x 0.7.
    assert ph["actor_update"] == pytest.approx(4 * (unit + 33_554_432 / 315e9))
    # Interleaved schedule with 2 virtual stages halves the bubble.
    vpp = AnalyticalTraining("qwen3-8b", "H100", gpus=8, pp=2, virtual_pipeline_stages=2)
    assert vpp.phases(SEQS)["pipeline_bubble"] == pytest.approx(ph["pipeline_bubble"] / 2)
    assert sum(ph.values()) == pytest.approx(t.step_time(SEQS), rel=1e-12)


def test_context_parallel_ring_attention_traffic_by_hand():
    from simrl.cost.analytical import AnalyticalTraining

    cp1 = AnalyticalTraining("qwen3-8b", "H100", gpus=8, cp=2)
    # dp = 4: 4096 tokens per DP group, 2048 per CP rank. Per pass: (cp-1) x 2048 tokens x 36 layers
    # x 8 KV heads x (128 + 128) x 2 B = 301,989,888 B over NVLink x 0.7.
    ring = 2048 * 36 * 8 * 256 * 2 / 315e9
    no_ring = cp1._activation_comm_time(4096, 1) - ring
    assert no_ring == pytest.approx(0.0, abs=1e-12)
    assert cp1._activation_comm_time(4096, 4) == pytest.approx(4 * ring)


def test_data_parallel_scaling_is_sublinear_across_nodes():
    from simrl.cost.analytical import AnalyticalTraining

    seqs = [2048] * 64
    t8 = AnalyticalTraining("qwen3-8b", "H100", gpus=8).step_time(seqs)
    t16 = AnalyticalTraining("qwen3-8b", "H100", gpus=16).step_time(seqs)
    # Twice the GPUs halve the compute, but the gradient sync grows ((n-1)/n) and leaves NVLink
    # (450 GB/s) for 8 NICs per node (8 x 50 = 400 GB/s), so the step is short of twice as fast.
    assert t8 / 2 < t16 < t8
    g8 = AnalyticalTraining("qwen3-8b", "H100", gpus=8).grad_sync_time()
    g16 = AnalyticalTraining("qwen3-8b", "H100", gpus=16).grad_sync_time()
    assert g16 / g8 == pytest.approx((15 / 16) / (7 / 8) * 450 / 400)
    # A DP group at stride TP = 8 has one member per node: one NIC (50 GB/s).
    g_tp8 = AnalyticalTraining("qwen3-32b", "H100", gpus=16, tp=8).grad_sync_time()
    per_gpu = model_arch("qwen3-32b").total_params / 8
    assert g_tp8 == pytest.approx(1 / 2 * per_gpu * 6 / (50e9 * 0.7))


def test_ulysses_sequence_parallel_by_hand():
    t = AnalyticalTraining("qwen3-8b", "H100", gpus=8, ulysses_sp=2)
    assert (t.dp, t._shard_group) == (4, 8)
    # Compute: 4 DP ranks x 2 SP ranks split the 8 sequences like 8 DP ranks.
    assert t._pass_compute(SEQS) == pytest.approx(AnalyticalTraining("qwen3-8b", "H100", gpus=8)._pass_compute(SEQS))
    # Per layer and pass, all-to-alls of q (32x128), k and v (8x(128+128)) and o (32x128) = 10,240
    # elements for 4096 / 2 = 2048 tokens in BF16 = 41,943,040 B; half leaves the GPU; 36 layers
    # over NVLink x 0.7: 36 x 0.5 x 41,943,040 / 315e9 = 2.3967 ms.
    assert t._activation_comm_time(4096, 1) == pytest.approx(36 * 0.5 * 41_943_040 / 315e9)
    with pytest.raises(CostModelError, match="ulysses_sp"):
        AnalyticalTraining("qwen3-8b", "H100", gpus=24, ulysses_sp=3)  # 32 heads over 3 ranks
    with pytest.raises(CostModelError, match="not divisible"):
        AnalyticalTraining("qwen3-8b", "H100", gpus=8, ulysses_sp=3)


def test_hsdp_shards_inside_a_group_and_all_reduces_across_by_hand():
    p = 8_190_735_360
    hsdp = AnalyticalTraining("qwen3-8b", "H100", gpus=16, zero_stage=3, fsdp_shard_size=8)
    full = AnalyticalTraining("qwen3-8b", "H100", gpus=16, zero_stage=3)
    # Inside the 8-GPU shard group (NVLink x 0.7): reduce-scatter fp32 grads + 2 bf16 gathers
    # (forward, backward; the recompute reuses the backward's): 7/8 x 8 B x P / 315e9 = 0.182017 s.
    # Across the 2 replicas, ranks 8 apart (one NIC, 50 GB/s x 0.7): all-reduce of the 1/8
    # gradient shard, 2 x 1/2 x 4P/8 / 35e9 = 0.117010 s.
    inner = 7 / 8 * 8 * p / 315e9
    outer = 4 * p / 8 / 35e9
    assert hsdp.grad_sync_time() == pytest.approx(inner + outer)
    assert hsdp.grad_sync_time() == pytest.approx(0.182017 + 0.117010, abs=1e-5)
    # Full sharding over 16 GPUs uses 8 NICs per node: 15/16 x 8 P / (400e9 x 0.7).
    assert full.grad_sync_time() == pytest.approx(15 / 16 * 8 * p / 280e9)
    # HSDP holds twice the sharded state of full sharding over 16.
    assert hsdp.state_bytes_per_gpu() == pytest.approx(2 * full.state_bytes_per_gpu())
    with pytest.raises(CostModelError, match="zero_stage=3"):
        AnalyticalTraining("qwen3-8b", "H100", gpus=16, zero_stage=1, fsdp_shard_size=8)
    with pytest.raises(CostModelError, match="must divide"):
        AnalyticalTraining("qwen3-8b", "H100", gpus=16, zero_stage=3, fsdp_shard_size=3)


def test_dynamic_batch_size_sets_micro_batches_by_tokens():
    # pp=2 on 8 GPUs: 4 DP ranks, 4096 tokens each. A 1024-token budget makes 4 micro-batches
    # (bubble 1/4) where micro_batch_size=1 makes 2 (bubble 1/2).
    dyn = AnalyticalTraining("qwen3-8b", "H100", gpus=8, pp=2, max_tokens_per_gpu=1024)
    fixed = AnalyticalTraining("qwen3-8b", "H100", gpus=8, pp=2)
    assert dyn._bubble(SEQS) == 1.25 and fixed._bubble(SEQS) == 1.5
    # A sample longer than the budget is its own micro-batch: memory as for one 2048-token sample.
    assert dyn.peak_memory_bytes(SEQS) == pytest.approx(fixed.peak_memory_bytes(SEQS), rel=0.02)
    big = AnalyticalTraining("qwen3-8b", "H100", gpus=8, pp=2, max_tokens_per_gpu=8192)
    assert big.peak_memory_bytes(SEQS) > dyn.peak_memory_bytes(SEQS)


def test_optimizer_steps_per_mini_batch_by_hand():
    # 8 samples of 2048 tokens on 8 H100 (dp 8, ZeRO-1); mini-batches of 2 samples -> 4 optimizer
    # steps (verl ppo_mini_batch_size, NeMo-RL train_global_batch_size), each paying the ZeRO-1
    # reduce-scatter + all-gather 7/8 x 8,190,735,360 x 6 B / 315e9 = 0.136513 s and the Adam update
    # 8,190,735,360 / 8 x 30 B / (3.35e12 x 0.7) = 0.0130981 s; compute is unchanged.
    one = AnalyticalTraining("qwen3-8b", "H100", gpus=8)
    four = AnalyticalTraining("qwen3-8b", "H100", gpus=8, mini_batch_samples=2)
    assert four.optimizer_steps(8) == 4 and four.optimizer_steps(7) == 4 and four.optimizer_steps(1) == 1
    sync, adam = 7 / 8 * 8_190_735_360 * 6 / 315e9, 8_190_735_360 / 8 * 30 / (3.35e12 * 0.7)
    p1, p4 = one.phases(SEQS), four.phases(SEQS)
    assert p4["grad_sync"] == pytest.approx(4 * sync) and p4["optimizer"] == pytest.approx(4 * adam)
    assert p4["actor_update"] == pytest.approx(p1["actor_update"])
    assert four.step_time(SEQS) - one.step_time(SEQS) == pytest.approx(3 * (sync + adam))
    # Two PPO epochs: twice the update passes and twice the optimizer steps.
    two_ep = AnalyticalTraining("qwen3-8b", "H100", gpus=8, mini_batch_samples=2, ppo_epochs=2)
    assert two_ep.optimizer_steps(8) == 8
    assert two_ep.phases(SEQS)["actor_update"] == pytest.approx(2 * p1["actor_update"])
    assert two_ep.phases(SEQS)["grad_sync"] == pytest.approx(8 * sync)


def test_each_mini_batch_is_its_own_pipeline_schedule_by_hand():
    # pp=2 on 8 GPUs: dp 4; 16 samples -> 4 micro-batches per rank for the whole batch (bubble 1/4).
    # In 2 mini-batches each schedule has 2 micro-batches: the update passes' bubble is 1/2; the
    # forward-only passes (old log-probs) still run over the whole batch (1/4).
    seqs = [2048] * 16
    t = AnalyticalTraining("qwen3-8b", "H100", gpus=8, pp=2, recompute_old_logprob=True, mini_batch_samples=8)
    unit = 4 * 2048 * F_1024 / (2 * 989e12 * 0.4)  # four samples per rank, half the layers
    assert t._pass_compute(seqs) == pytest.approx(unit)
    assert t.phases(seqs)["pipeline_bubble"] == pytest.approx(1 * unit * 0.25 + 4 * unit * 0.5)
    whole = AnalyticalTraining("qwen3-8b", "H100", gpus=8, pp=2, recompute_old_logprob=True)
    assert whole.phases(seqs)["pipeline_bubble"] == pytest.approx(5 * unit * 0.25)
    with pytest.raises(ValueError):
        AnalyticalTraining("qwen3-8b", "H100", gpus=8, mini_batch_samples=0)


def test_ep_all_to_all_sends_each_tp_ranks_sequence_shard_by_hand():
    kw = dict(gpus=16, tp=2, activation_checkpointing=False, zero_stage=3)  # ZeRO-3: the no-EP layout fits
    moe = AnalyticalTraining("qwen3-30b-a3b", "H100", ep=8, **kw)
    no_ep = AnalyticalTraining("qwen3-30b-a3b", "H100", **kw)
    # 65,536 tokens on a DP rank; sequence parallel leaves 32,768 on each TP rank: 32,768 x 2048 x 2 B
    # = 134,217,728 B, k = 8 copies, 7/8 of them off the GPU, dispatch + combine, 48 MoE layers, over
    # NVLink (EP 8 in one node: 450 GB/s x 0.7): 2 x 48 x 7/8 x 134,217,728 x 8 / 315e9 = 0.2863313 s.
    # The alltoall dispatcher's NCCL exchange reaches moe_alltoall_efficiency (0.19) of that:
    # 0.2863313 / 0.19 = 1.5070061 s.
    ep_s = moe._activation_comm_time(65_536, 1) - no_ep._activation_comm_time(65_536, 1)
    assert ep_s == pytest.approx(2 * 48 * 7 / 8 * 134_217_728 * 8 / (315e9 * 0.19), rel=1e-9)
    assert ep_s == pytest.approx(1.5070061, rel=1e-6)
    # flex (DeepEP): one copy per rank holding one of the token's experts, at the link's rate:
    # 7 ranks x (1 - C(112, 8) / C(128, 8)) = 7 x 0.66741961 = 4.6719373 copies;
    # 2 x 48 x 134,217,728 x 4.6719373 / 315e9 = 0.1911030 s
    flex = AnalyticalTraining("qwen3-30b-a3b", "H100", ep=8, moe_token_dispatcher_type="flex", **kw)
    assert flex.ep_copies() == (pytest.approx(4.6719373, rel=1e-7), 0.0)
    flex_s = flex._activation_comm_time(65_536, 1) - no_ep._activation_comm_time(65_536, 1)
    assert flex_s == pytest.approx(0.1911030, rel=1e-6)


def test_ep_exchange_across_nodes_by_hand():
    # EP 16 on 16 H100 (tp 1): 8 EP ranks per node, 2 nodes. 4,096 tokens per rank: 4,096 x 2048 x 2 B
    # = 16,777,216 B per copy-row set.
    kw = dict(gpus=16, ep=16, activation_checkpointing=False)
    # alltoall: k (l - 1) / ep = 8 x 7 / 16 = 3.5 copies over NVLink (315e9 x 0.19 = 59.85e9 B/s) and
    # k (ep - l) / ep = 8 x 8 / 16 = 4 over the NIC (400 Gb/s = 50e9 x 0.7 = 35e9 B/s), concurrently:
    # max(3.5 / 59.85e9, 4 / 35e9) = 1.1428571e-10 s per byte-copy; x 2 (dispatch, combine) x 48 layers
    # x 16,777,216 B = 0.1840700 s
    a2a = AnalyticalTraining("qwen3-30b-a3b", "H100", **kw)
    assert a2a.ep_copies() == (3.5, 4.0)
    one = AnalyticalTraining("qwen3-30b-a3b", "H100", gpus=16, activation_checkpointing=False, zero_stage=3)
    ep_s = a2a._activation_comm_time(4096, 1) - one._activation_comm_time(4096, 1)
    assert ep_s == pytest.approx(2 * 48 * 16_777_216 * 4 / 35e9, rel=1e-9)
    assert ep_s == pytest.approx(0.1840700, rel=1e-6)
    # flex (HybridEP / DeepEP): once per destination node over the NIC, p_node = 1 - C(64, 8) / C(128, 8)
    # = 0.99690414; over NVLink n (l - 1) p_rank = 2 x 7 x (1 - C(120, 8) / C(128, 8)) = 14 x 0.41228205
    # = 5.7719487 copies at 315e9: max(1.8324e-11, 2.8483e-11): the NIC;
    # 2 x 48 x 16,777,216 x 0.99690414 / 35e9 = 0.0458750 s
    flex = AnalyticalTraining("qwen3-30b-a3b", "H100", moe_token_dispatcher_type="flex", **kw)
    nv, ib = flex.ep_copies()
    assert nv == pytest.approx(5.7719487, rel=1e-7) and ib == pytest.approx(0.99690414, rel=1e-7)
    flex_s = flex._activation_comm_time(4096, 1) - one._activation_comm_time(4096, 1)
    assert flex_s == pytest.approx(0.0458750, rel=1e-6)
    with pytest.raises(ValueError):
        AnalyticalTraining("qwen3-30b-a3b", "H100", moe_token_dispatcher_type="allgather", **kw)


def test_fsdp_collectives_run_per_micro_batch_by_hand():
    # ZeRO-3 on 8 H100 (dp 8, NVLink x 0.7 = 315e9); 16 samples of 2048 tokens, mini-batches of 8
    # (2 optimizer steps) and a 1024-token budget: 16 x 2048 / 8 = 4096 tokens per rank = 4
    # micro-batches, 2 per mini-batch. FSDP2 gathers the BF16 weights in each micro-batch's forward
    # and backward (7/8 x 2 B x P / 315e9 = 0.0455041 s each, P = 8,190,735,360) and
    # reduce-scatters its fp32 gradients (7/8 x 4 B x P / 315e9 = 0.0910082 s):
    # 4 x (2 x 0.0455041 + 0.0910082) = 0.728066 s. The old-log-prob forward gathers once per
    # micro-batch: 4 x 0.0455041 = 0.182016 s on top of its compute.
    seqs = [2048] * 16
    t = AnalyticalTraining("qwen3-8b", "H100", gpus=8, zero_stage=3, max_tokens_per_gpu=1024,
                           mini_batch_samples=8, recompute_old_logprob=True)
    p = 8_190_735_360
    gather, reduce = 7 / 8 * 2 * p / 315e9, 7 / 8 * 4 * p / 315e9
    assert t.param_gather_time() == pytest.approx(gather) and t.grad_reduce_time() == pytest.approx(reduce)
    ph = t.phases(seqs)
    assert ph["grad_sync"] == pytest.approx(4 * (2 * gather + reduce))
    assert ph["grad_sync"] == pytest.approx(0.728066, abs=1e-5)
    assert ph["old_log_prob"] - t._pass_compute(seqs) == pytest.approx(0.182016, abs=1e-5)
    # ZeRO-1 reduces once per optimizer step whatever the micro-batches: 2 x 7/8 x 6 B x P / 315e9.
    z1 = AnalyticalTraining("qwen3-8b", "H100", gpus=8, max_tokens_per_gpu=1024, mini_batch_samples=8,
                            recompute_old_logprob=True)
    assert z1.phases(seqs)["grad_sync"] == pytest.approx(2 * 7 / 8 * 6 * p / 315e9)
    assert z1.phases(seqs)["old_log_prob"] == pytest.approx(z1._pass_compute(seqs))


def test_dp_barrier_with_verl_batch_balance_by_hand():
    # 2 H100 (dp 2), 8 samples, mini-batches of 4 (2 optimizer steps). verl balances the whole
    # batch once: 2 partitions of 4, longest first to the lighter one (ties to partition 0):
    # 4000 -> p0, 3000 -> p1, then the 1000s: p1 (4000), p0 (5000), p1 (5000), p0 (6000), p1 (full),
    # p0. p0 = samples 0, 2, 5, 7 = [4000, 1000, 1000, 1000]; p1 = 1, 3, 4, 6 = [1000, 1000, 3000,
    # 1000]. Each rank walks its share in slices of 2: step 1 waits for rank 0 (4000 + 1000), step
    # 2 for rank 1 (3000 + 1000). With F(s) = s x (15,136,212,992 + 294,912 s) FLOPs (qwen3-8b
    # forward, causal): F(1000) = 1.5431e13, F(3000) = 4.8063e13, F(4000) = 6.5263e13;
    # barrier = F4000 + F3000 + 2 F1000 = 1.44189e14 against the even split
    # (F4000 + F3000 + 6 F1000) / 2 = 1.02957e14: the update passes take 1.40048x as long.
    seqs = [4000, 1000, 1000, 1000, 3000, 1000, 1000, 1000]
    batch = AnalyticalTraining("qwen3-8b", "H100", gpus=2, zero_stage=3, mini_batch_samples=4, dp_balance="batch")
    even = AnalyticalTraining("qwen3-8b", "H100", gpus=2, zero_stage=3, mini_batch_samples=4)
    assert batch.dp_imbalance_flops(seqs, 2) == pytest.approx(1.44188540928e14)
    assert batch.phases(seqs)["actor_update"] / even.phases(seqs)["actor_update"] == pytest.approx(1.400480, abs=1e-5)
    # Forward-only passes and everything else are unchanged; one mini-batch is balanced as a whole.
    assert batch.phases(seqs)["grad_sync"] == pytest.approx(even.phases(seqs)["grad_sync"])
    one = AnalyticalTraining("qwen3-8b", "H100", gpus=2, zero_stage=3, dp_balance="batch")
    whole = AnalyticalTraining("qwen3-8b", "H100", gpus=2, zero_stage=3)
    assert one.phases(seqs)["actor_update"] == pytest.approx(whole.phases(seqs)["actor_update"])
    with pytest.raises(ValueError):
        AnalyticalTraining("qwen3-8b", "H100", gpus=2, zero_stage=3, dp_balance="greedy")


def test_moe_bytes_per_token_by_hand():
    # Qwen3-30B-A3B (H 2048, I 768, k 8, E 128, 48 MoE layers), per layer and token, forward:
    # k*H activations through permute, sort, sort back, unpermute (7 k H + H = 116,736 elements),
    # SwiGLU over k rows (3 k I = 18,432): 135,168 x 2 B = 270,336 B; router logits 3 x 128 x 4 B = 1,536 B
    # -> 271,872 B x 48 = 13,049,856 B
    t = AnalyticalTraining("qwen3-30b-a3b", "H100", gpus=16, tp=2, ep=8)
    assert t.moe_bytes_per_token() == 13_049_856
    assert AnalyticalTraining("qwen3-8b", "H100").moe_bytes_per_token() == 0.0


def test_moe_pass_time_by_hand():
    from simrl.cost import formulas as F

    q = F.AnalyticalParams(
        dp=2.0, two_p=2e9, attn_c=1e5, lin_f=0.0, flops_per_s=1e15, tp=1.0, pp=1.0, cp=1.0, sp=1.0, layers=2.0,
        hidden=64.0, pdt=2.0, bw_tp_coll=1e11, ep=2.0, n_moe=0.0, k=2.0, bw_ep=1e11, bw_pp=1e11, n_full=2.0,
        kv_el=128.0, kv_div=1.0, bw_cp=1e11, sp_width=512.0, bw_sp=1e11, micro_batch_size=1.0,
        max_tokens_per_gpu=0.0, seq_split=1.0, vpp=1.0, mini_batch_samples=0.0, ppo_epochs=1.0, update_passes=4.0,
        old_lp=0.0, ref=0.0, lp_fwd=0.0, critic=0.0, overlap=0.0, zero3=0.0, grad_sync_s=0.5, gather_s=0.0,
        optimizer_s=0.1, overhead_s=0.2, is_moe=1.0, moe_fwd_flops=1e9, moe_bytes=1e6, hbm_rank=1e12,
        gpu_split=1.0, experts=4.0, tile_rows=128.0, imb_given=1.25, imb_c=0.6931471805599453)
    # 2 samples, 4000 tokens, 2 DP ranks, 1 sample per micro-batch: 1 micro-batch of 2000 tokens per GPU;
    # per expert m = 2000 * k 2 * ep 2 / E 4 = 2000 rows -> 16 tiles of 128 = 2048: g = 2000 / 2048;
    # measured imbalance 1.25: 2000 tokens * (1e9 * (1.25 * 1.024 - 1) / 1e15 + 1e6 / 1e12)
    #   = 2000 * (2.8e-7 + 1e-6) = 2.56e-3 s per pass
    assert F.analytical_moe_pass_time(F.PY, q, 4000, 1) == pytest.approx(2.56e-3, rel=1e-12)
    # uniform routing: mu = 2000 * 2 = 4000 assignments per rank, imb = 1 + sqrt(2 ln 2 * 1/2 / 4000)
    #   = 1.0131638...; 2000 * 1e-6 * imb * 1.024 (the FLOP and byte terms are both 1e-6 s per token)
    uni = q._replace(imb_given=0.0)
    imb = 1 + (0.6931471805599453 / 4000) ** 0.5
    assert F.analytical_moe_pass_time(F.PY, uni, 4000, 1) == pytest.approx(2e-3 * imb * 1.024, rel=1e-12)
    # in the step: each of the 4 update passes (unit 6.45e-3 s, test_formulas' dense record) gains 2.56e-3:
    # 0.8258 - 4 * 6.45e-3 + 4 * (6.45e-3 + 2.56e-3) = 0.83604
    fwd = [F.analytical_fwd_flops(F.PY, q, s) for s in (1000, 3000)]
    assert F.analytical_step_time(F.PY, q, 2, 4000, sum(fwd), max(fwd)) == pytest.approx(0.83604, rel=1e-12)
    dense = q._replace(is_moe=0.0)  # a dense record adds nothing
    assert F.analytical_moe_pass_time(F.PY, dense, 4000, 1) == 0.0
    assert F.analytical_step_time(F.PY, dense, 2, 4000, sum(fwd), max(fwd)) == pytest.approx(0.8258, rel=1e-12)
    # host floor: 1 micro-batch x 24 MoE layers x 5e-4 s = 0.012 s > 6.45e-3 + 2.56e-3 (GPU): each of the 4
    # update passes lasts 0.012: 0.8258 - 0.0258 + 4 * 0.012 = 0.848
    host = q._replace(n_moe=24.0, moe_host_s=5e-4, ep=1.0, imb_given=0.0)  # no EP: no all-to-all, imb 1
    assert F.analytical_moe_pass_time(F.PY, host, 4000, 1) == pytest.approx(2.048e-3, rel=1e-12)  # 2e-3 * 1.024
    assert F.analytical_step_time(F.PY, host, 2, 4000, sum(fwd), max(fwd)) == pytest.approx(0.848, rel=1e-12)
    # with 1e-4 s per layer the floor (2.4e-3) is under the GPU time: 0.8258 - 0.0258 + 4 * (6.45e-3 + 2.048e-3)
    low = host._replace(moe_host_s=1e-4)
    assert F.analytical_step_time(F.PY, low, 2, 4000, sum(fwd), max(fwd)) == pytest.approx(0.833992, rel=1e-12)
    # no tiles (moe_gemm_tile_rows=0) and no EP: only the bytes, 2000 * 1e-6 = 2e-3
    assert F.analytical_moe_pass_time(F.PY, q._replace(tile_rows=0.0, ep=1.0), 4000, 1) == pytest.approx(
        2e-3, rel=1e-12)


def test_moe_layers_cost_more_than_their_flops_at_the_mfu():
    lens = [3000] * 64
    kw = dict(gpus=16, tp=2, ep=8, activation_checkpointing=False)
    t = AnalyticalTraining("qwen3-30b-a3b", "H100", **kw)
    off = AnalyticalTraining("qwen3-30b-a3b", "H100", **kw, moe_bandwidth_efficiency=1.0, moe_gemm_tile_rows=0,
                             moe_imbalance=1.0)
    assert t.step_time(lens) > off.step_time(lens)
    skewed = AnalyticalTraining("qwen3-30b-a3b", "H100", **kw, moe_imbalance=1.5)
    assert skewed.step_time(lens) > t.step_time(lens)
    # a host floor (off by default) of 2.935 ms per layer binds: 8 DP ranks, 8 one-sample micro-batches
    # each, 48 MoE layers, 3 passes: 8 * 48 * 2.935e-3 * 3 = 3.38112 s (the GPU needs about 2.3 s)
    host = AnalyticalTraining("qwen3-30b-a3b", "H100", **kw, moe_host_s_per_layer=2.935e-3)
    assert host.phases(lens)["actor_update"] == pytest.approx(3.38112 + 3 * host._activation_comm_time(
        sum(lens) / host.dp, 1), rel=1e-12)
    assert t.phases(lens)["actor_update"] - 3 * t._activation_comm_time(sum(lens) / t.dp, 1) < 3.38112


#: Megatron-Bridge's published MoE pretraining rows (NVIDIA-NeMo/Megatron-Bridge@067f987d
#: docs/performance-summary-archive.md; 4,096-token sequences, dropless, experts force-balanced; the
#: dispatcher from scripts/performance/configs/{qwen,gpt_oss}/ at the release's commit): model, GPU, GPUs,
#: layout, MBS, GBS, dispatcher, published tokens/s/GPU. FP8 / MXFP8 rows are priced in BF16 here.
MB_ROWS = [
    ("qwen3-30b-a3b", "B200", 8, dict(ep=8), 1, 512, "alltoall", 9691),  # 26.02: calibrates the efficiency
    ("qwen3-30b-a3b", "B200", 8, dict(ep=8), 1, 512, "alltoall", 9299),  # 25.11
    ("qwen3-30b-a3b", "H100", 16, dict(pp=2, ep=8, virtual_pipeline_stages=12), 1, 1024, "alltoall", 5113),  # 26.02
    ("qwen3-30b-a3b", "H100", 16, dict(pp=2, ep=8, virtual_pipeline_stages=24), 2, 512, "alltoall", 5275),  # 25.11
    ("gpt-oss-120b", "H100", 64, dict(pp=4, ep=8), 1, 1280, "alltoall", 5993),  # 26.02, BF16
    ("qwen3-30b-a3b", "H100", 16, dict(ep=16), 1, 1024, "flex", 8960),  # 26.04.01, HybridEP over 2 nodes
    ("qwen3-30b-a3b", "GB200", 8, dict(ep=8), 4, 512, "flex", 26084),  # 26.02, HybridEP
]


def test_moe_training_against_megatron_bridge_rows():
    """docs/fidelity.md, "MoE cards, session 6": one efficiency calibrated on the first row, the rest held
    out; each within 15 % (the session-5 model, a host floor and the link-rate exchange, was 1.4-1.8x fast
    on the H100 alltoall rows and 0.47x on the cross-node HybridEP row)."""
    # calibration row by hand: 64 one-sample micro-batches per GPU = 262,144 tokens of 2048 x 2 B; the
    # alltoall exchange sends 7 of 8 copies over NVLink (900e9 x 0.7 x 0.19 = 119.7e9 B/s), dispatch and
    # combine, 48 layers: 2 x 48 x 7 x 1,073,741,824 / 119.7e9 = 6.02802 s per pass, 18.0841 s of the update
    b200 = AnalyticalTraining("qwen3-30b-a3b", "B200", gpus=8, ep=8, activation_checkpointing=False)
    none = AnalyticalTraining("qwen3-30b-a3b", "B200", gpus=8, ep=8, activation_checkpointing=False,
                              moe_token_dispatcher_type="flex", comm_efficiency=1.0)
    ep_pass = b200._activation_comm_time(262_144, 1)
    assert ep_pass == pytest.approx(6.02802, rel=1e-6)
    assert none._activation_comm_time(262_144, 1) < ep_pass / 5
    for model, gpu, gpus, lay, mbs, gbs, disp, pub in MB_ROWS:
        t = AnalyticalTraining(model, gpu, gpus=gpus, micro_batch_size=mbs, activation_checkpointing=False,
                               moe_token_dispatcher_type=disp, **lay)
        sim = gbs * 4096 / gpus / t.step_time([4096] * gbs)
        assert abs(sim / pub - 1) < 0.15, (model, gpu, lay, mbs, disp, sim, pub)

def test_logprob_micro_batches_set_the_forward_passes_bubble_by_hand():
    # pp=2 on 8 GPUs: dp=4, 8 samples of 2048 -> 2 samples, 4096 tokens per rank. The update packs
    # micro-batches of 1024 tokens (4 per rank, stretch (pp-1)/4 = 0.25); the two forward-only
    # passes (old log-prob, reference) pack 4096 (1 per rank, stretch 1): bubble = 2 x unit x 1 +
    # 4 x unit x 0.25 = 3 x unit. NeMo-RL: train_mb_tokens vs logprob_mb_tokens.
    kw = dict(gpus=8, pp=2, max_tokens_per_gpu=1024, recompute_old_logprob=True, reference_model=True)
    t = AnalyticalTraining("qwen3-8b", "H100", logprob_max_tokens_per_gpu=4096, **kw)
    unit = 2 * 2048 * F_1024 / (2 * 989e12 * 0.4)  # two samples per rank, half the layers
    assert t.phases(SEQS)["pipeline_bubble"] == pytest.approx(3 * unit, rel=1e-12)
    # the same budget as the update's: 2 x unit x 0.25 + 4 x unit x 0.25 = 1.5 x unit
    same = AnalyticalTraining("qwen3-8b", "H100", **kw)
    assert same.phases(SEQS)["pipeline_bubble"] == pytest.approx(1.5 * unit, rel=1e-12)
    # samples instead (logprob_batch_size without packing): 1 per micro-batch -> 2 per rank, stretch 0.5:
    # 2 x unit x 0.5 + 4 x unit x 0.25 = 2 x unit
    by_n = AnalyticalTraining("qwen3-8b", "H100", logprob_micro_batch_size=1, **kw)
    assert by_n.phases(SEQS)["pipeline_bubble"] == pytest.approx(2 * unit, rel=1e-12)
    # the forward passes' own time (no bubble) does not change with their micro-batches on a dense model
    assert t.phases(SEQS)["old_log_prob"] == same.phases(SEQS)["old_log_prob"]


def test_logprob_micro_batches_set_the_moe_host_floor_by_hand():
    from simrl.cost import formulas as F

    q = F.AnalyticalParams(
        dp=2.0, two_p=2e9, attn_c=1e5, lin_f=0.0, flops_per_s=1e15, tp=1.0, pp=1.0, cp=1.0, sp=1.0, layers=2.0,
        hidden=64.0, pdt=2.0, bw_tp_coll=1e11, ep=1.0, n_moe=24.0, k=2.0, bw_ep=1e11, bw_pp=1e11, n_full=2.0,
        kv_el=128.0, kv_div=1.0, bw_cp=1e11, sp_width=512.0, bw_sp=1e11, micro_batch_size=1.0,
        max_tokens_per_gpu=500.0, seq_split=1.0, vpp=1.0, mini_batch_samples=0.0, ppo_epochs=1.0,
        update_passes=4.0, old_lp=1.0, ref=0.0, lp_fwd=0.0, critic=0.0, overlap=0.0, zero3=0.0, grad_sync_s=0.5,
        gather_s=0.0, optimizer_s=0.1, overhead_s=0.2, is_moe=1.0, moe_fwd_flops=1e9, moe_bytes=1e6,
        hbm_rank=1e12, gpu_split=1.0, experts=4.0, tile_rows=128.0, imb_given=0.0, imb_c=0.0, moe_host_s=5e-4)
    fwd = [F.analytical_fwd_flops(F.PY, q, s) for s in (1000, 3000)]
    # 2 samples, 4000 tokens, 2 DP ranks: 2000 tokens per rank. The update's 500-token budget gives 4
    # micro-batches: host floor 4 x 24 MoE layers x 5e-4 s = 0.048 s per pass, over the GPU's
    # 6.45e-3 (dense unit, test_moe_pass_time_by_hand) + 2.048e-3 (m = 500 x 2 / 4 = 250 rows in 2
    # tiles of 128: 2000 x 1e-6 x 256/250). Without a log-prob budget the old-log-prob forward pays it too.
    ph = dict(zip(F.ANALYTICAL_PHASES, F.analytical_phase_values(F.PY, q, 2, 4000, sum(fwd), max(fwd)), strict=True))
    assert ph["old_log_prob"] == pytest.approx(0.048, rel=1e-12)
    assert ph["actor_update"] == pytest.approx(4 * 0.048, rel=1e-12)
    # A 2000-token log-prob budget: 1 micro-batch per rank, floor 1 x 24 x 5e-4 = 0.012 s, still over the
    # GPU's 6.45e-3 + 2.048e-3 (m = 2000 x 2 / 4 = 1000 rows in 8 tiles: 2000 x 1e-6 x 1024/1000)
    lp = q._replace(lp_max_tokens=2000.0)
    ph = dict(zip(F.ANALYTICAL_PHASES, F.analytical_phase_values(F.PY, lp, 2, 4000, sum(fwd), max(fwd)), strict=True))
    assert ph["old_log_prob"] == pytest.approx(0.012, rel=1e-12)
    assert ph["actor_update"] == pytest.approx(4 * 0.048, rel=1e-12)  # the update keeps its own micro-batches
    # by samples: 1 sample per micro-batch -> 1 per rank, the same 0.012
    by_n = q._replace(lp_micro_batch_size=1.0)
    assert F.analytical_phase_values(F.PY, by_n, 2, 4000, sum(fwd), max(fwd))[0] == pytest.approx(0.012, rel=1e-12)


def test_reference_on_host_swap_by_hand():
    # NeMo-RL's Megatron worker (use_reference_model): Llama-3.1-8B (8,030,261,248 parameters) at PP 2
    # on 16 H100: 4,015,130,624 per GPU, 8,030,261,248 B in BF16. Three copies over PCIe Gen5 at
    # 64 GB/s x 0.8: 3 x 8,030,261,248 / 51.2e9 = 0.470523 s; the DP parameter all-gather of the
    # distributed optimizer (8 ranks in one node, NVLink 450 GB/s x 0.7): 7/8 x 8,030,261,248 / 315e9
    # = 0.022306 s. Total 0.492829 s, added to the reference forward once per step.
    kw = dict(gpus=16, pp=2, reference_model=True)
    t = AnalyticalTraining("meta-llama/Llama-3.1-8B", "H100", reference_on_host=True, **kw)
    assert t.params_per_gpu() == 4_015_130_624
    assert t.reference_swap_time() == pytest.approx(3 * 8_030_261_248 / 51.2e9 + 7 / 8 * 8_030_261_248 / 315e9,
                                                    rel=1e-12)
    assert t.reference_swap_time() == pytest.approx(0.492829, abs=1e-6)
    on_gpu = AnalyticalTraining("meta-llama/Llama-3.1-8B", "H100", **kw)
    ph, base = t.phases(SEQS), on_gpu.phases(SEQS)
    assert on_gpu.reference_swap_time() == 0.0
    assert ph["ref_forward"] == pytest.approx(base["ref_forward"] + t.reference_swap_time(), rel=1e-12)
    assert {k: v for k, v in ph.items() if k != "ref_forward"} == {k: v for k, v in base.items() if k != "ref_forward"}
    # one DP rank (PP 2 on 2 GPUs): no all-gather, only the three host copies
    one = AnalyticalTraining("meta-llama/Llama-3.1-8B", "H100", gpus=2, pp=2, reference_model=True,
                             reference_on_host=True)
    assert one.reference_swap_time() == pytest.approx(3 * 8_030_261_248 / 51.2e9, rel=1e-12)
    with pytest.raises(CostModelError, match="reference_on_host=true needs reference_model=true"):
        AnalyticalTraining("meta-llama/Llama-3.1-8B", "H100", gpus=16, pp=2, reference_on_host=True)


def test_lm_head_on_the_last_pipeline_stage_by_hand():
    # Megatron's even split: Qwen3-8B's 36 layers 18 + 18 over pp=2, the LM head (2 x 151,936 x 4,096 =
    # 1,244,659,712 FLOPs per token) on stage 2. 8 GPUs, dp 4: 4,096 tokens per rank. Every pass runs
    # at the last stage's pace: H (pp - 1) more per rank's tokens, 4,096 x 1,244,659,712 x 1 /
    # (2 x 989e12 x 0.4) = 6.443537e-3 s per forward-equivalent pass.
    kw = dict(gpus=8, pp=2, recompute_old_logprob=True)
    t = AnalyticalTraining("qwen3-8b", "H100", head_on_last_stage=True, **kw)
    even = AnalyticalTraining("qwen3-8b", "H100", **kw)
    last = 4096 * 1_244_659_712 / (2 * 989e12 * 0.4)
    assert last == pytest.approx(6.443537e-3, rel=1e-6)
    ph, base = t.phases(SEQS), even.phases(SEQS)
    assert ph["old_log_prob"] == pytest.approx(base["old_log_prob"] + last, rel=1e-12)
    assert ph["actor_update"] == pytest.approx(base["actor_update"] + 4 * last, rel=1e-12)  # 3 passes + recompute
    # one stage holds everything: nothing to add
    one = AnalyticalTraining("qwen3-8b", "H100", gpus=8, head_on_last_stage=True)
    assert one.phases(SEQS) == AnalyticalTraining("qwen3-8b", "H100", gpus=8).phases(SEQS)


def test_fp32_log_softmax_over_the_vocabulary_by_hand():
    # NeMo-RL DistributedLogprob (with the temperature div_): 50 B per vocabulary entry and token in a
    # forward, 22 B more in the backward. Qwen3-8B (vocab 151,936) at TP 1 on 8 GPUs, dp 8: 2,048 tokens
    # per rank, H100 HBM 3.35 TB/s x 0.7. Forward-only pass: 2,048 x 50 x 151,936 / 2.345e12 =
    # 6.634647e-3 s; update (forward + backward once): 2,048 x 72 x 151,936 / 2.345e12 = 9.553891e-3 s.
    kw = dict(gpus=8, recompute_old_logprob=True, reference_model=True)
    t = AnalyticalTraining("qwen3-8b", "H100", distributed_logprob=True, **kw)
    base = AnalyticalTraining("qwen3-8b", "H100", **kw).phases(SEQS)
    ph = t.phases(SEQS)
    fwd, both = 2048 * 50 * 151_936 / 2.345e12, 2048 * 72 * 151_936 / 2.345e12
    assert fwd == pytest.approx(6.634647e-3, rel=1e-6) and both == pytest.approx(9.553891e-3, rel=1e-6)
    assert ph["old_log_prob"] == pytest.approx(base["old_log_prob"] + fwd, rel=1e-12)
    assert ph["ref_forward"] == pytest.approx(base["ref_forward"] + fwd, rel=1e-12)
    assert ph["actor_update"] == pytest.approx(base["actor_update"] + both, rel=1e-12)
    # TP 2 splits the vocabulary: half of it per GPU; 4 DP ranks: twice the tokens per rank -> the same
    tp2 = AnalyticalTraining("qwen3-8b", "H100", tp=2, distributed_logprob=True, **kw)
    tp2_base = AnalyticalTraining("qwen3-8b", "H100", tp=2, **kw).phases(SEQS)
    assert tp2.phases(SEQS)["old_log_prob"] == pytest.approx(tp2_base["old_log_prob"] + fwd, rel=1e-12)
    # the PPO value model computes no log-probs: its phase does not change
    crit = AnalyticalTraining("qwen3-8b", "H100", critic=True, distributed_logprob=True, **kw)
    assert crit.phases(SEQS)["critic_update"] == AnalyticalTraining(
        "qwen3-8b", "H100", critic=True, **kw).phases(SEQS)["critic_update"]
