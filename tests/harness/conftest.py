"""Fixtures for harness tests: the fake nvidia-smi on PATH, a private state dir, synthetic backends."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import bench_synthetic  # noqa: E402


def gpu(i: int) -> dict:
    return {"index": i, "uuid": f"GPU-{i:08x}-2296-6285-0a86-84d0f6c6790{i}", "name": "NVIDIA H200",
            "pci_bus_id": f"00000000:{0x1A + i:02X}:00.0", "memory_total": 143771, "memory_used": 0}


class FakeSmi:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.state = {"driver_version": "570.124.06", "gpus": [gpu(i) for i in range(8)], "processes": []}
        self.write()

    def write(self) -> None:
        self.path.write_text(json.dumps(self.state))

    def uuid(self, i: int) -> str:
        return self.state["gpus"][i]["uuid"]

    def busy(self, i: int, pid: int = 4242, memory: int = 130004, name: str = "/usr/bin/python3") -> None:
        self.state["processes"].append({"gpu_uuid": self.uuid(i), "pid": pid, "process_name": name,
                                        "used_memory": memory})
        self.state["gpus"][i]["memory_used"] = memory
        self.write()


@pytest.fixture
def fake_smi(tmp_path, monkeypatch) -> FakeSmi:
    monkeypatch.setenv("PATH", f"{HERE / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_PYTHON", sys.executable)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_STATE", str(tmp_path / "smi.json"))
    monkeypatch.setenv("RL_BENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RL_BENCH_NVIDIA_SMI", raising=False)
    return FakeSmi(tmp_path / "smi.json")


@pytest.fixture
def synthetic(monkeypatch):
    """Route the workload generator and the sim runtime to the deterministic test doubles."""
    import workloads
    from harness import backends

    monkeypatch.setattr(workloads, "generate", bench_synthetic.fake_generate, raising=False)
    monkeypatch.setattr(backends, "load", lambda backend, runtime: bench_synthetic)
    return bench_synthetic


def _fake_env(mp: pytest.MonkeyPatch, root: Path) -> FakeSmi:
    mp.setenv("PATH", f"{HERE / 'bin'}{os.pathsep}{os.environ['PATH']}")
    mp.setenv("FAKE_NVIDIA_SMI_PYTHON", sys.executable)
    mp.setenv("FAKE_NVIDIA_SMI_STATE", str(root / "smi.json"))
    mp.setenv("RL_BENCH_STATE_DIR", str(root / "state"))
    mp.delenv("RL_BENCH_NVIDIA_SMI", raising=False)
    return FakeSmi(root / "smi.json")


def _synthetic(mp: pytest.MonkeyPatch) -> None:
    import workloads
    from harness import backends

    mp.setattr(workloads, "generate", bench_synthetic.fake_generate, raising=False)
    mp.setattr(backends, "load", lambda backend, runtime: bench_synthetic)


@pytest.fixture(scope="session")
def _valid_template(tmp_path_factory) -> Path:
    from harness.run import RunRequest, run_one

    root = tmp_path_factory.mktemp("valid")
    with pytest.MonkeyPatch.context() as mp:
        _fake_env(mp, root)
        _synthetic(mp)
        req = RunRequest(backend="skyrl", workload="multi_turn", gpus="0,1,2,3", runtime="sim",
                         results_dir=str(root / "results"), argv=("bench", "run"))
        run_dir, man = run_one(req, echo=lambda m: None)
    assert man["status"] == "valid", man["reasons"]
    return run_dir


@pytest.fixture
def valid_run(_valid_template, synthetic, tmp_path) -> Path:
    """A complete, VALID results dir made by the synthetic backend through the real run path."""
    dest = tmp_path / "results" / _valid_template.name
    shutil.copytree(_valid_template, dest)
    return dest
