"""nvidia-smi parsing and GPU resolution, against the fake nvidia-smi and literal outputs."""

from __future__ import annotations

import subprocess

import pytest

from harness import nvsmi
from harness.errors import BenchError


def test_list_and_resolve_by_index_and_uuid(fake_smi):
    gpus = nvsmi.list_gpus()
    assert len(gpus) == 8 and gpus[0].memory_total_mib == 143771 and gpus[0].driver_version == "570.124.06"
    picked = nvsmi.resolve(f"4,5,{fake_smi.uuid(6)},7", gpus)
    assert [g.index for g in picked] == [4, 5, 6, 7]


@pytest.mark.parametrize("spec,msg", [
    ("0,1,2", "4 distinct devices"),
    ("0,1,2,2", "same device twice"),
    (None, "same device twice"),  # index and UUID of one GPU
    ("0,1,2,9", "no GPU with index 9"),
    ("0,1,2,GPU-nope", "neither a GPU index"),
    ("0,,1,2", "empty entry"),
])
def test_resolve_rejects(fake_smi, spec, msg):
    spec = spec or f"0,1,2,{fake_smi.uuid(0)}"
    with pytest.raises(BenchError, match=msg):
        nvsmi.resolve(spec, nvsmi.list_gpus())


def test_parsers_handle_na_not_found_and_messages():
    gpus = nvsmi.parse_gpus("0, GPU-a, NVIDIA GB10, 00000000:01:00.0, [N/A], [Not Supported], 580.1\n")
    assert gpus[0].memory_total_mib is None and gpus[0].memory_used_mib is None
    apps = nvsmi.parse_apps("No running processes found\nGPU-a, 1328667, [Not Found], [N/A]\n"
                            "GPU-a, [N/A], x, 5\n")
    assert len(apps) == 1 and apps[0].pid == 1328667 and apps[0].process_name is None
    assert apps[0].used_memory_mib is None


def test_fake_formats_and_errors(fake_smi):
    def smi(*args):
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)

    out = smi("-L").stdout.splitlines()
    assert out[0] == f"GPU 0: NVIDIA H200 (UUID: {fake_smi.uuid(0)})"
    units = smi("--query-gpu=index,memory.used", "--format=csv").stdout.splitlines()
    assert units[0] == "index, memory.used [MiB]" and units[1] == "0, 0 MiB"
    one = smi("-i", "3", "--query-gpu=uuid", "--format=csv,nounits,noheader").stdout
    assert one.strip() == fake_smi.uuid(3)
    assert smi("--query-gpu=bogus", "--format=csv").returncode == 2
    fake_smi.state["exit_code"], fake_smi.state["message"] = 9, "NVIDIA-SMI has failed because it couldn't communicate"
    fake_smi.write()
    with pytest.raises(nvsmi.NvidiaSmiError, match="exited 9: NVIDIA-SMI has failed"):
        nvsmi.list_gpus()


def test_occupancy_flags_processes_and_memory(fake_smi):
    fake_smi.busy(1)
    fake_smi.state["gpus"][2]["memory_used"] = 2048
    fake_smi.state["no_process_message"] = True
    fake_smi.write()
    snap = nvsmi.occupancy([fake_smi.uuid(i) for i in range(4)])
    assert not snap["clean"]
    assert any("pid 4242" in p for p in snap["problems"]) and any("2048 MiB" in p for p in snap["problems"])
    assert nvsmi.occupancy([fake_smi.uuid(i) for i in (0, 3, 4, 5)])["clean"]
