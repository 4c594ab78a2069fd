"""nvidia-smi access: query GPUs and compute processes, resolve `--gpus` to UUIDs, check idleness.

Always uses ``--format=csv,noheader,nounits``. Unsupported values (``[N/A]``, ``[Not
Supported]``, ``[Not Found]``) parse to None, and process lines whose pid is not an integer
(e.g. "No running processes found") are skipped. The executable is ``$RL_BENCH_NVIDIA_SMI`` or
``nvidia-smi`` on PATH. Nothing here ever kills a process or picks a GPU the user did not name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import attrs

from harness.errors import BenchError, GpuBusy
from harness.pins import GPUS_PER_RUN, MEMORY_USED_THRESHOLD_MIB

GPU_FIELDS = ("index", "uuid", "name", "pci.bus_id", "memory.total", "memory.used", "driver_version")
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
FORMAT = "--format=csv,noheader,nounits"


class NvidiaSmiError(BenchError):
    """nvidia-smi is missing or failed; the message carries its exit code and output."""


@attrs.frozen
class GpuInfo:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    driver_version: str

    def to_dict(self) -> dict:
        return attrs.asdict(self)


@attrs.frozen
class ComputeApp:
    gpu_uuid: str
    pid: int
    process_name: str | None
    used_memory_mib: int | None

    def to_dict(self) -> dict:
        return attrs.asdict(self)


def executable() -> str:
    exe = os.environ.get("RL_BENCH_NVIDIA_SMI") or shutil.which("nvidia-smi")
    if not exe:
        raise NvidiaSmiError("nvidia-smi not found on PATH (set RL_BENCH_NVIDIA_SMI to its path)")
    return exe


def run(args: list[str], timeout_s: float = 30.0) -> str:
    """stdout of ``nvidia-smi args``; any failure becomes an NvidiaSmiError naming the exit code."""
    cmd = [executable(), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NvidiaSmiError(f"nvidia-smi could not run: {exc}") from exc
    if proc.returncode != 0:
        msg = (proc.stdout + proc.stderr).strip().splitlines()
        raise NvidiaSmiError(f"nvidia-smi exited {proc.returncode}: {msg[0] if msg else '(no output)'}")
    return proc.stdout


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text.startswith("[") and text.endswith("]") else text


def _int(text: str) -> int | None:
    v = _value(text)
    if v is None:
        return None
    try:
        return int(float(v.split()[0]))  # tolerate "143771 MiB" should units slip through
    except (ValueError, IndexError):
        return None


def _rows(stdout: str, n_fields: int) -> list[list[str]]:
    rows = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(", ")]
        if len(parts) == n_fields:
            rows.append(parts)
    return rows


def parse_gpus(stdout: str) -> list[GpuInfo]:
    out = []
    for idx, uuid, name, bus, total, used, driver in _rows(stdout, len(GPU_FIELDS)):
        index = _int(idx)
        if index is None or not uuid.startswith(("GPU-", "MIG-")):
            continue
        out.append(GpuInfo(index, uuid, name, bus, _int(total), _int(used), _value(driver) or ""))
    return out


def parse_apps(stdout: str) -> list[ComputeApp]:
    out = []
    for uuid, pid, pname, mem in _rows(stdout, len(APP_FIELDS)):
        p = _int(pid)
        if p is None or not pid.strip().isdigit():
            continue
        out.append(ComputeApp(uuid, p, _value(pname), _int(mem)))
    return out


def list_gpus() -> list[GpuInfo]:
    gpus = parse_gpus(run([f"--query-gpu={','.join(GPU_FIELDS)}", FORMAT]))
    if not gpus:
        raise NvidiaSmiError("nvidia-smi reported no GPUs")
    return gpus


def compute_apps() -> list[ComputeApp]:
    return parse_apps(run([f"--query-compute-apps={','.join(APP_FIELDS)}", FORMAT]))


def check_spec(spec: str, count: int = GPUS_PER_RUN) -> list[str]:
    """The syntax of ``--gpus``, checked before a results directory is made: ``count`` distinct,
    non-empty entries, each a host index or a device UUID (``GPU-...``/``MIG-...``)."""
    items = [s.strip() for s in spec.split(",")]
    if any(not i for i in items):
        raise BenchError(f"--gpus {spec!r}: empty entry; expected {count} comma-separated GPU indices or UUIDs")
    for item in items:
        if not (item.isdigit() or item.startswith(("GPU-", "MIG-"))):
            raise BenchError(f"--gpus: {item!r} is neither a GPU index (0, 1, ...) nor a UUID (GPU-...) "
                             "as `bench gpus` lists them")
    if len(set(items)) != len(items):
        raise BenchError(f"--gpus {spec!r}: names the same device twice; {count} distinct devices are required")
    if len(items) != count:
        raise BenchError(f"--gpus {spec!r}: {count} distinct devices are required, got {len(items)}")
    return items


def resolve(spec: str, gpus: list[GpuInfo], count: int = GPUS_PER_RUN) -> list[GpuInfo]:
    """Resolve ``--gpus`` (indices or exact UUIDs, comma separated) once, in the order given."""
    by_index = {g.index: g for g in gpus}
    by_uuid = {g.uuid: g for g in gpus}
    picked: list[GpuInfo] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            raise BenchError(f"--gpus {spec!r}: empty entry")
        if item.isdigit():
            if int(item) not in by_index:
                raise BenchError(f"--gpus: no GPU with index {item} (have {sorted(by_index)})")
            picked.append(by_index[int(item)])
        elif item in by_uuid:
            picked.append(by_uuid[item])
        else:
            raise BenchError(f"--gpus: {item!r} is neither a GPU index nor an exact UUID from `bench gpus`")
    if len({g.uuid for g in picked}) != len(picked):
        raise BenchError(f"--gpus {spec!r}: names the same device twice; {count} distinct devices are required")
    if len(picked) != count:
        raise BenchError(f"--gpus {spec!r}: {count} distinct devices are required, got {len(picked)}")
    return picked


def occupancy(uuids: list[str], threshold_mib: int = MEMORY_USED_THRESHOLD_MIB) -> dict:
    """A snapshot of the given GPUs: the raw nvidia-smi output, and what it says (see `judge`).

    The raw ``--query-gpu`` and ``--query-compute-apps`` stdout is kept so validation can
    recompute the verdict from the snapshot itself rather than trust the recorded flag.
    """
    raw = {"query_gpu": run([f"--query-gpu={','.join(GPU_FIELDS)}", FORMAT]),
           "query_compute_apps": run([f"--query-compute-apps={','.join(APP_FIELDS)}", FORMAT])}
    return {"time_unix": time.time(), "threshold_mib": threshold_mib, "raw": raw,
            **judge(raw, uuids, threshold_mib)}


def judge(raw: dict, uuids: list[str], threshold_mib: int) -> dict:
    """What a raw snapshot says about ``uuids``: per-GPU rows, problems, and clean = no problems."""
    listed = parse_gpus(raw.get("query_gpu", ""))
    gpus = {g.uuid: g for g in listed}
    apps = parse_apps(raw.get("query_compute_apps", ""))
    rows, problems = [], []
    for uuid in uuids:
        g = gpus.get(uuid)
        seen = sum(x.uuid == uuid for x in listed)
        if seen > 1:  # nvidia-smi prints a device once; two rows could say two things (the last would win)
            problems.append(f"{uuid}: {seen} rows in one nvidia-smi output")
        procs = [a.to_dict() for a in apps if a.gpu_uuid == uuid]
        if g is None:
            problems.append(f"{uuid}: no longer reported by nvidia-smi")
            rows.append({"uuid": uuid, "memory_used_mib": None, "processes": procs})
            continue
        if procs:
            names = ", ".join(f"pid {p['pid']} ({p['process_name'] or 'unknown'})" for p in procs)
            problems.append(f"GPU {g.index} {uuid}: compute processes running: {names}")
        if g.memory_used_mib is None:
            problems.append(f"GPU {g.index} {uuid}: memory.used not reported")
        elif g.memory_used_mib > threshold_mib:
            problems.append(f"GPU {g.index} {uuid}: {g.memory_used_mib} MiB used > {threshold_mib} MiB threshold")
        rows.append({"uuid": uuid, "index": g.index, "memory_used_mib": g.memory_used_mib, "processes": procs})
    return {"gpus": rows, "clean": not problems, "problems": problems}


def require_idle(uuids: list[str], when: str) -> dict:
    snap = occupancy(uuids)
    if not snap["clean"]:
        raise GpuBusy(f"GPUs busy {when}: " + "; ".join(snap["problems"]))
    return snap
