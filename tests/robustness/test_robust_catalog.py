"""Malformed hardware and model catalog entries and weight-sync knobs, through `srl run`.

Custom GPUs (figures inline or a YAML file), Hugging Face ``config.json`` files given as
``deployment.model``, and the weight-sync families' knobs: each bad input is exit status 2, no
traceback, a message naming the key (and the file where there is one), nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from robust_common import run_args

from simrl.cli.main import cli as srl_cli
from simrl.cost.catalog import data_path

QWEN = json.loads((data_path("models") / "Qwen--Qwen3-8B.json").read_text(encoding="utf-8"))
BASE = ["run", "-o", "{tmp}/out", "run.training_steps=1", "workload.groups=4", "policy=bounded_async",
        "policy.batch_groups=2"]
GPU = "deployment.rollout.gpu="


def model(**edit) -> str:
    d = {**QWEN, **edit}
    return json.dumps({k: v for k, v in d.items() if v != "__del__"})


# (name, files {name: content}, overrides, expected): `{f}` in an override is the tmp directory.
CASES = [
    ("gpu_missing_bw", {}, [GPU + "{name: X, flops: 400 TFLOPS, hbm_bytes: 96 GB}"], ["deployment.rollout.gpu", "hbm_bw"]),
    ("gpu_neg_flops", {}, [GPU + "{name: X, flops: -400 TFLOPS, hbm_bytes: 96 GB, hbm_bw: 3 TB/s}"],
     ["deployment.rollout.gpu", "flops"]),
    ("gpu_zero_hbm", {}, [GPU + "{name: X, flops: 400 TFLOPS, hbm_bytes: 0, hbm_bw: 3 TB/s}"],
     ["deployment.rollout.gpu", "hbm_bytes"]),
    ("gpu_nan_bw", {}, [GPU + "{name: X, flops: 400 TFLOPS, hbm_bytes: 96 GB, hbm_bw: .nan}"],
     ["deployment.rollout.gpu", "hbm_bw"]),
    ("gpu_bad_unit", {}, [GPU + "{name: X, flops: 400 TFLOPZ, hbm_bytes: 96 GB, hbm_bw: 3 TB/s}"],
     ["deployment.rollout.gpu", "flops"]),
    ("gpu_key_typo", {}, [GPU + "{name: X, base: H100, nvlnk_bw: 1 TB/s}"], ["deployment.rollout.gpu", "nvlnk_bw"]),
    ("gpu_base_unknown", {}, [GPU + "{name: X, base: H1000, hbm_bw: 2 TB/s}"], ["deployment.rollout.gpu", "H1000"]),
    ("gpu_per_node_float", {}, [GPU + "{name: X, base: H100, gpus_per_node: 7.5}"],
     ["deployment.rollout.gpu", "gpus_per_node"]),
    ("gpu_list", {}, [GPU + "[1, 2]"], ["deployment.rollout.gpu"]),
    ("gpu_file_missing", {}, [GPU + "{f}/nope.yaml"], ["deployment.rollout.gpu", "nope.yaml"]),
    ("gpu_file_latin1", {"chip.yaml": "name: caf\xe9\n".encode("latin-1")}, [GPU + "{f}/chip.yaml"],
     ["deployment.rollout.gpu", "chip.yaml:1", "UTF-8"]),
    ("gpu_file_duplicate", {"chip.yaml": "name: a\nname: b\nflops: 1 TFLOPS\nhbm_bytes: 1 GB\nhbm_bw: 1 TB/s\n"},
     [GPU + "{f}/chip.yaml"], ["chip.yaml:2", "duplicate key 'name'"]),
    ("gpu_file_two_gpus", {"chip.yaml": "A: {flops: 1 TFLOPS, hbm_bytes: 1 GB, hbm_bw: 1 TB/s}\n"
                                        "B: {flops: 1 TFLOPS, hbm_bytes: 1 GB, hbm_bw: 1 TB/s}\n"},
     [GPU + "{f}/chip.yaml"], ["chip.yaml", "2 GPUs"]),
    ("gpu_file_empty", {"chip.yaml": ""}, [GPU + "{f}/chip.yaml"], ["chip.yaml"]),
    ("model_missing_file", {}, ["deployment.model={f}/nope/config.json"], ["deployment.model", "cannot read"]),
    ("model_bad_json", {"m.json": '{"a": 1,'}, ["deployment.model={f}/m.json"], ["m.json:1", "not valid JSON"]),
    ("model_latin1", {"m.json": b'{"model_type": "caf\xe9"}'}, ["deployment.model={f}/m.json"], ["m.json:1", "UTF-8"]),
    ("model_empty", {"m.json": ""}, ["deployment.model={f}/m.json"], ["m.json"]),
    ("model_list", {"m.json": "[1]"}, ["deployment.model={f}/m.json"], ["m.json", "JSON object"]),
    ("model_duplicate", {"m.json": '{"hidden_size": 1,\n "hidden_size": 2}'}, ["deployment.model={f}/m.json"],
     ["m.json", "hidden_size"]),
    ("model_nan", {"m.json": model(hidden_size=float("nan"))}, ["deployment.model={f}/m.json"], ["m.json"]),
    ("model_no_layers", {"m.json": model(num_hidden_layers="__del__")}, ["deployment.model={f}/m.json"],
     ["m.json", "num_hidden_layers"]),
    ("model_str_layers", {"m.json": model(num_hidden_layers="36")}, ["deployment.model={f}/m.json"],
     ["m.json", "num_hidden_layers"]),
    ("model_float_layers", {"m.json": model(num_hidden_layers=36.5)}, ["deployment.model={f}/m.json"],
     ["m.json", "num_hidden_layers"]),
    ("model_neg_hidden", {"m.json": model(hidden_size=-4096)}, ["deployment.model={f}/m.json"], ["m.json", "hidden_size"]),
    ("model_zero_heads", {"m.json": model(num_attention_heads=0)}, ["deployment.model={f}/m.json"],
     ["m.json", "num_attention_heads"]),
    ("model_bool_vocab", {"m.json": model(vocab_size=True)}, ["deployment.model={f}/m.json"], ["m.json", "vocab_size"]),
    ("model_mamba", {"m.json": model(model_type="mamba")}, ["deployment.model={f}/m.json"], ["m.json", "model_type"]),
    ("model_kv_heads_divide", {"m.json": model(num_key_value_heads=5)}, ["deployment.model={f}/m.json"],
     ["m.json", "num_key_value_heads", "divide"]),
    ("model_dir_without_config", {}, ["deployment.model={f}"], ["deployment.model", "config.json"]),
    ("ws_knob_string", {}, ["cost.weight_sync=nccl", "cost.weight_sync_knobs.comm_efficiency=fast"],
     ["cost.weight_sync_knobs.comm_efficiency"]),
    ("ws_knob_negative", {}, ["cost.weight_sync=nccl", "cost.weight_sync_knobs.bucket_bytes=-1"],
     ["cost.weight_sync_knobs.bucket_bytes"]),
    ("ws_knob_nan", {}, ["cost.weight_sync=nccl", "cost.weight_sync_knobs.overhead_s=.nan"],
     ["cost.weight_sync_knobs.overhead_s"]),
    ("ws_link_enum", {}, ["cost.weight_sync=nccl", "cost.weight_sync_knobs.link=nvlnk"], ["cost.weight_sync_knobs.link"]),
    ("ws_granularity_enum", {}, ["cost.weight_sync=nccl", "cost.weight_sync_knobs.load_granularity=tensr"],
     ["cost.weight_sync_knobs.load_granularity"]),
    ("ws_filesystem_typo", {}, ["cost.weight_sync=filesystem", "cost.weight_sync_knobs.bandwdth=1"],
     ["cost.weight_sync_knobs.bandwdth"]),
    ("ws_efficiency_zero", {}, ["cost.weight_sync=nccl", "cost.weight_sync_knobs.comm_efficiency=0"],
     ["cost.weight_sync_knobs.comm_efficiency"]),
    ("ws_bool_for_number", {}, ["cost.weight_sync=nccl", "cost.weight_sync_knobs.dtype_bytes=true"],
     ["cost.weight_sync_knobs.dtype_bytes"]),
    ("ws_list_for_number", {}, ["cost.weight_sync=nccl", "cost.weight_sync_knobs.bandwidth_bytes_per_s=[1]"],
     ["cost.weight_sync_knobs.bandwidth_bytes_per_s"]),
]


@pytest.mark.parametrize("name, files, overrides, expect", CASES, ids=[c[0] for c in CASES])
def test_malformed_catalog_entry_is_a_clean_error(tmp_path, name, files, overrides, expect):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for fname, content in files.items():
        (inputs / fname).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    work = tmp_path / "work"
    run_args(srl_cli, [*BASE, *(o.replace("{f}", str(inputs)) for o in overrides)], work, expect, name)
    assert not Path(work, "out").exists()
