"""Weight-publication modes: formulas, ordering, knobs."""

import pytest

from simrl.cost.architectures import model_arch
from simrl.cost.base import CostModelError, WeightSyncCost
from simrl.cost.weight_sync import WEIGHT_SYNC_DEFAULTS, WeightSync


def test_mode_ordering_for_qwen3_8b():
    t = {m: WeightSync(m, "qwen3-8b").publish_time(4) for m in ("lora", "checkpoint_engine", "nccl", "filesystem")}
    assert t["lora"] < t["checkpoint_engine"] / 3
    assert t["checkpoint_engine"] < t["nccl"] < t["filesystem"]
    assert 1.0 < t["nccl"] < 10.0


def test_is_a_weight_sync_cost():
    assert isinstance(WeightSync("nccl", "qwen3-8b"), WeightSyncCost)


def test_nccl_formula():
    w = WeightSync("nccl", "qwen3-8b", bucket_bytes=2**30, bucket_latency_s=0.1, overhead_s=1.0,
                   bandwidth_bytes_per_s=10e9, per_instance_s=0.5)
    size = model_arch("qwen3-8b").weight_bytes(2)
    buckets = -(-size // 2**30)
    assert w.publish_time(2) == pytest.approx(1.0 + 0.1 * buckets + size / 10e9 + 2 * 0.5)
    assert w.publish_time(3) - w.publish_time(2) == pytest.approx(0.5)


def test_smaller_buckets_cost_more():
    big = WeightSync("nccl", "qwen3-8b", bucket_bytes=2**30).publish_time(1)
    small = WeightSync("nccl", "qwen3-8b", bucket_bytes=2**24).publish_time(1)
    assert small > big


def test_lora_moves_only_the_adapter():
    w = WeightSync("lora", "qwen3-8b", rank=16)
    assert w.payload_bytes() == model_arch("qwen3-8b").lora_params(16) * 2
    assert w.payload_bytes() < WeightSync("nccl", "qwen3-8b").payload_bytes() / 50


def test_filesystem_readers_share_bandwidth():
    w = WeightSync("filesystem", "qwen3-8b")
    assert w.publish_time(64) > w.publish_time(1)


def test_fixed_mode():
    assert WeightSync("fixed", publish_s=2.5).publish_time(8) == 2.5
    with pytest.raises(CostModelError, match="publish_s"):
        WeightSync("fixed")


def test_unknown_mode_and_knob():
    with pytest.raises(CostModelError, match="nccl"):
        WeightSync("rdma", "qwen3-8b")
    with pytest.raises(CostModelError, match="bucket_bytes"):
        WeightSync("nccl", "qwen3-8b", bucket_size=1)
    with pytest.raises(CostModelError, match=">= 0"):
        WeightSync("nccl", "qwen3-8b", overhead_s=-1)


def test_every_mode_has_documented_defaults():
    assert set(WEIGHT_SYNC_DEFAULTS) == {"nccl", "checkpoint_engine", "filesystem", "lora", "fixed"}
