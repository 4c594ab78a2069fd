"""Provenance every profiler stamps on its observations: hardware, driver, library versions, commit, date.

`collect` returns a dict with the keys docs/observations.md requires (``hardware``, ``source``,
``date``) plus ``host``, ``driver`` and ``software``. Everything is read from the running system;
what cannot be read is ``"unknown"``, never guessed. torch is passed in by the caller (profilers
import it lazily), so this module imports nothing heavy.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def nvidia_driver() -> str:
    """The NVIDIA kernel driver version (/proc/driver/nvidia/version), or "unknown"."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            first = fh.readline()
    except OSError:
        return "unknown"
    for tok in first.split():
        if tok.count(".") >= 1 and tok.replace(".", "").isdigit():
            return tok
    return first.strip() or "unknown"


def simrl_commit() -> str:
    """The git commit of this checkout (with ``-dirty`` when it has changes), else the package version."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=40"],
                             capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        from importlib.metadata import version

        return f"simrl {version('simrl')}"
    except Exception:  # noqa: BLE001 - metadata absent in a source tree without install
        return "unknown"


def torch_software(torch) -> dict[str, Any]:
    sw: dict[str, Any] = {"torch": torch.__version__}
    if torch.version.cuda:
        sw["cuda"] = torch.version.cuda
    try:
        if torch.cuda.is_available():
            nccl = torch.cuda.nccl.version()
            sw["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
            sw["cudnn"] = str(torch.backends.cudnn.version())
    except Exception:  # noqa: BLE001 - a CPU build has no NCCL; nothing to record
        pass
    return sw


def device_hardware(torch, device: str | None) -> str:
    """``torch.cuda.get_device_name`` for a CUDA device, else the CPU model with ``(CPU)``."""
    if torch is not None and device and str(device).startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"{cpu_name()} (CPU)"


def collect(profiler: str, *, torch=None, device: str | None = None, extra_software: dict | None = None,
            hardware: str | None = None) -> dict[str, Any]:
    """The provenance dict of one profiler run on this host."""
    host = socket.gethostname()
    software: dict[str, Any] = {"profiler": profiler, "simrl_commit": simrl_commit(),
                                "python": platform.python_version()}
    if torch is not None:
        software.update(torch_software(torch))
    software.update(extra_software or {})
    prov = {
        "hardware": hardware or device_hardware(torch, device),
        "source": f"{profiler} on {host}",
        "date": utc_now(),
        "host": host,
        "driver": nvidia_driver(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu_count": os.cpu_count() or 0,
        "software": software,
    }
    return prov
