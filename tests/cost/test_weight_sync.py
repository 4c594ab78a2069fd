"""Weight-publication modes: formulas, ordering, knobs."""

import pytest

from simrl.cost.architectures import model_arch
from simrl.cost.base import CostModelError, WeightSyncCost
from simrl.cost.weight_sync import WEIGHT_SYNC_DEFAULTS, WeightSync


def test_mode_ordering_for_qwen3_8b():
    t = {m: WeightSync(m, "qwen3-8b").publish_time(4) for m in ("lora", "checkpoint_engine", "nccl", "filesystem")}
    assert t["lora"] < t["checkpoint_engine"] / 3
    assert t["checkpoint_engine"] < t["nccl"] < t["filesystem"]
    assert 0.3 < t["nccl"] < 1.5  # real systems: ~0.1-1 s for a 7-8B model


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


def test_nccl_priced_over_the_nic_across_nodes_by_hand():
    # Qwen3-8B: 8,190,735,360 params x 2 B = 16,381,470,720 B in ceil(/512 MiB) = 31 buckets.
    # Across nodes (default: trainer and rollout on different nodes), an H100's 400 Gb/s NIC x 0.8:
    # 0.15 + 31 x 0.005 + 16,381,470,720 / 40e9 + 2 x 0.02 = 0.754537 s.
    w = WeightSync("nccl", "qwen3-8b")
    assert w.link() == "ib"
    assert w.publish_time(2) == pytest.approx(0.15 + 31 * 0.005 + 16_381_470_720 / 40e9 + 0.04)
    # Qwen2.5-7B: 15,231,233,024 B, 29 buckets, one instance: 0.15 + 29 x 0.005 + 0.380781 + 0.02 = 0.695781 s.
    assert WeightSync("nccl", "qwen2.5-7b").publish_time(1) == pytest.approx(0.695781, abs=1e-6)


def test_nccl_inside_one_node_uses_nvlink():
    # 4 trainer + 4 rollout GPUs share an 8-GPU node: NVLink 450 GB/s x 0.8 = 360 GB/s.
    w = WeightSync("nccl", "qwen3-8b", trainer_gpus=4, rollout_gpus=4)
    assert w.link() == "nvlink"
    assert w.publish_time(2) == pytest.approx(0.15 + 31 * 0.005 + 16_381_470_720 / 360e9 + 0.04)
    assert WeightSync("nccl", "qwen3-8b", trainer_gpus=8, rollout_gpus=8).link() == "ib"
    assert WeightSync("nccl", "qwen3-8b", placement="colocated").link() == "nvlink"
    # The GPU's own links: an H800's NVLink is 200 GB/s one way, an L40S has none (PCIe).
    h800 = WeightSync("nccl", "qwen3-8b", gpu="H800", link="nvlink")
    assert h800.bandwidth_bytes_per_s() == pytest.approx(160e9)
    assert WeightSync("nccl", "qwen3-8b", gpu="L40S", link="nvlink").bandwidth_bytes_per_s() == pytest.approx(25.6e9)
    # An explicit bandwidth wins over the link.
    assert WeightSync("nccl", "qwen3-8b", bandwidth_bytes_per_s=5e9).bandwidth_bytes_per_s() == 5e9


def test_nccl_link_knob_is_checked():
    with pytest.raises(CostModelError, match="link"):
        WeightSync("nccl", "qwen3-8b", link="ethernet")
    with pytest.raises(CostModelError, match="comm_efficiency"):
        WeightSync("nccl", "qwen3-8b", comm_efficiency=1.5)
    with pytest.raises(CostModelError, match="placement"):
        WeightSync("nccl", "qwen3-8b", placement="shared")


def test_build_passes_the_deployment_to_weight_sync():
    from simrl.config import load_config
    from simrl.cost.build import build_costs

    # Default deployment: 2 rollout GPUs + 8 trainer GPUs > one 8-GPU node: the NIC.
    assert build_costs(load_config()).weight_sync.link() == "ib"
    small = build_costs(load_config(None, ["deployment.training.gpus=4"])).weight_sync
    assert small.link() == "nvlink" and small.publish_time(2) < 0.5


def test_only_nccl_derives_its_bandwidth():
    with pytest.raises(CostModelError, match="bandwidth_bytes_per_s"):
        WeightSync("lora", "qwen3-8b", bandwidth_bytes_per_s=None)
