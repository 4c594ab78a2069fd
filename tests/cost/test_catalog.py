"""The open catalog end to end: a custom GPU and a config.json model given in the run config."""

import json

import pytest

from simrl.config import ConfigError, load_config
from simrl.cost.build import build_costs
from simrl.cost.catalog import data_path


def test_custom_gpu_in_the_config_prices_the_rollout():
    cfg = load_config(None, ["deployment.rollout.gpu={name: MyChip, flops: 989 TFLOPS, hbm_bytes: 80 GiB, "
                             "hbm_bw: 3.35 TB/s, intra_node_bw: 450 GB/s, inter_node_bw: 400 Gb/s}"])
    ref = build_costs(load_config(None, ["deployment.rollout.gpu=H100"])).rollout
    got = build_costs(cfg).rollout
    assert got.gpu.name == "MyChip"
    # Same figures as H100 except the reported HBM capacity (80 GiB vs 81559 MiB): identical step times.
    assert got.iteration_time(64, 64 * 2000, 0) == ref.iteration_time(64, 64 * 2000, 0)
    # Half the HBM bandwidth makes memory-bound decode slower.
    slow = build_costs(load_config(None, ["deployment.rollout.gpu={name: Slow, base: H100, hbm_bw: 1.675 TB/s}"]))
    assert slow.rollout.iteration_time(64, 64 * 2000, 0) > 1.5 * ref.iteration_time(64, 64 * 2000, 0) - 0.01


def test_gpu_yaml_file_in_the_config(tmp_path):
    f = tmp_path / "chip.yaml"
    f.write_text("name: Chip\nbase: H200\nhbm_bytes: 100 GiB\n")
    costs = build_costs(load_config(None, [f"deployment.training.gpu={f}"]))
    assert costs.training.memory_capacity_bytes() == 100 * 2**30


def test_bad_custom_gpu_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"deployment.rollout.gpu: gpu.hbm_bw: required"):
        load_config(None, ["deployment.rollout.gpu={name: X, flops: 1 PFLOPS, hbm_bytes: 80 GB}"])


def test_model_by_config_json_path(tmp_path):
    src = json.loads((data_path("models") / "Qwen--Qwen3-8B.json").read_text())
    f = tmp_path / "config.json"
    f.write_text(json.dumps(src))
    by_path = build_costs(load_config(None, [f"deployment.model={f}"]))
    by_id = build_costs(load_config(None, ["deployment.model=Qwen/Qwen3-8B"]))
    assert by_path.rollout.kv_capacity_tokens() == by_id.rollout.kv_capacity_tokens()
    assert by_path.training.step_time([1000, 2000]) == by_id.training.step_time([1000, 2000])
