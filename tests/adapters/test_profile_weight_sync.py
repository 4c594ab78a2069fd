"""`srl-profile weight-sync`: bucket arithmetic, observation assembly, and a real gloo run when torch is present."""

import importlib.util

import pytest
from click.testing import CliRunner

from adapters import weight_sync as ws
from adapters.cli import cli
from simrl.cost.observations import read_observations

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch not installed (the profile-torch extra)")
PROV = {"hardware": "test", "source": "test", "date": "2026-01-01"}


def test_bucket_sizes():
    mib = ws.MiB
    # 40 MiB of bf16 in 16 MiB buckets: 8 Mi + 8 Mi + 4 Mi elements (16 + 16 + 8 MiB).
    assert ws.bucket_sizes(40 * mib, 16 * mib) == [8 * mib, 8 * mib, 4 * mib]
    assert ws.bucket_sizes(16 * mib, 16 * mib) == [8 * mib]
    assert sum(ws.bucket_sizes(3 * mib + 2, mib)) * 2 == 3 * mib + 2


def test_observation_and_validation():
    plan = ws.SyncPlan()
    ob = ws.sync_observation("broadcast", plan, 4 * ws.MiB, 2, [0.3, 0.1, 0.2], 1, PROV)
    assert ob.kind == "weight_sync" and ob.value == pytest.approx(0.2) and ob.inputs["n_instances"] == 2
    assert ob.inputs["backend"] == "gloo" and ob.provenance["timing"]["max"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="unusable"):
        ws.sync_observation("broadcast", plan, 4, 1, [0.0], 1, PROV)
    for bad, match in [(dict(methods=("rdma",)), "--method"), (dict(instances=(0,)), "--instances"),
                       (dict(bucket_mb=0), "--bucket-mb"), (dict(device="cuda", start_method="fork"), "fork")]:
        with pytest.raises(ValueError, match=match):
            ws.validate(ws.SyncPlan(**bad))


@needs_torch
def test_real_broadcast_and_checkpoint_on_cpu(tmp_path):
    out = tmp_path / "ws.jsonl"
    r = CliRunner().invoke(cli, ["weight-sync", "--sizes-mb", "0.5,4", "--instances", "1", "--method",
                                 "broadcast,filesystem", "--repeats", "2", "--start-method", "fork",
                                 "--dir", str(tmp_path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    obs = read_observations(out)
    assert [(o.inputs["method"], o.inputs["bytes"]) for o in obs] == [
        ("broadcast", 2**19), ("broadcast", 4 * 2**20), ("filesystem", 2**19), ("filesystem", 4 * 2**20)]
    assert all(o.value > 0 and o.inputs["n_instances"] == 1 for o in obs)
    assert not list(tmp_path.glob("srl-weight-sync-*.pt"))  # the checkpoint is removed


@needs_torch
def test_json_output_lists_the_observations_written(tmp_path):
    import json

    out = tmp_path / "ws.jsonl"
    r = CliRunner().invoke(cli, ["weight-sync", "--sizes-mb", "0.5", "--instances", "1",
                                                 "--repeats", "1", "--warmup", "0", "--start-method", "fork",
                                                 "--json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert (data["output"], data["observations"]) == (str(out), 1)
    rec = data["records"][0]
    assert rec["kind"] == "weight_sync" and rec["inputs"]["bytes"] == 2**19 and rec["value"] > 0
    assert len(read_observations(out)) == 1


def test_nccl_without_gpus_is_refused_naming_what_it_needs(monkeypatch):
    import types

    from adapters import weight_sync as ws

    cpu_torch = types.SimpleNamespace(
        __version__="2.13.0+cpu", cuda=types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0),
        distributed=types.SimpleNamespace(is_available=lambda: True, is_nccl_available=lambda: False,
                                          is_gloo_available=lambda: True))
    monkeypatch.setattr("adapters.fsdp.require_torch", lambda: cpu_torch)
    with pytest.raises(ValueError, match=r"--device cuda: 3 ranks need as many GPUs \(NCCL: one NVIDIA GPU per "
                                         r"rank and a CUDA build of torch\); torch 2.13.0\+cpu sees 0"):
        ws.profile_weight_sync(ws.SyncPlan(device="cuda"))
