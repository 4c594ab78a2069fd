"""Convert Vidur-format profiling CSVs (real H100 measurements) into observations.

Two layouts are understood, both as published by the Vidur project:

- ``compute/<gpu>/<org>/<model>/mlp.csv``: one row per (num_tokens, TP) run of one transformer
  layer's non-attention operators; columns ``time_stats.<op>.{min,max,mean,median,std}`` in
  milliseconds plus the shape columns. Each (row, operator) becomes one ``operator``
  observation: value = median, spread = std, converted to seconds.
- ``network/<topology>/{all_reduce,send_recv}.csv``: collective times in milliseconds by
  ``size`` (number of fp16 elements), ``num_workers`` and ``devices_per_node``. Each row
  becomes one ``collective`` observation with ``size_bytes = 2 * size``.

Missing operators (an empty or absent column, e.g. phi-2 has no post-attention layernorm) are
skipped, not invented.

The H100 subset the project uses ships with it as package data (``simrl/cost/data/vidur``, MIT
licence and NOTICE beside the CSVs); `vidur_data_dir` finds it. ``srl-profile fetch vidur``
downloads the full upstream set into the same layout.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

from simrl.cost.observations import Observation, make

VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
MS_TO_S = 1e-3
FP16_BYTES = 2
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size")
SHIPPED_VIDUR = Path(__file__).resolve().parent / "data" / "vidur"


def vidur_data_dir(part: str = "") -> Path:
    """The Vidur data shipped with the package (``compute/``, ``network/``, ``traces/``), or ``part``
    of it; an error naming the path when the install lacks it."""
    path = SHIPPED_VIDUR / part if part else SHIPPED_VIDUR
    if not path.exists():
        raise FileNotFoundError(f"{path}: the shipped Vidur data is missing from this install "
                                "(reinstall simrl, or fetch it: srl-profile fetch vidur -o DIR)")
    return path


def _provenance(rel: str, hardware: str) -> dict:
    return {
        "hardware": hardware,
        "software": {"profiler": "vidur", "vidur_commit": VIDUR_COMMIT},
        "date": "unknown",
        "source": f"vidur:data/{rel}",
    }


def _gpu_name(token: str) -> str:
    return {"h100": "NVIDIA H100", "a100": "NVIDIA A100"}.get(token.lower(), token)


def _float(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    val = float(text)
    return val if math.isfinite(val) else None


def import_mlp_csv(path: Path, rel: str) -> list[Observation]:
    """One ``operator`` observation per (row, operator) of a Vidur ``mlp.csv``."""
    parts = Path(rel).parts  # compute/<gpu>/<org>/<model>/mlp.csv
    gpu = parts[1] if len(parts) >= 5 else "unknown"
    model = "/".join(parts[2:-1]) if len(parts) >= 5 else Path(rel).parent.name
    out = []
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        ops = sorted({c.split(".")[1] for c in reader.fieldnames or () if c.startswith("time_stats.")})
        for row in reader:
            inputs = {c: int(row[c]) for c in SHAPE_COLUMNS}
            inputs["use_gated_mlp"] = row["use_gated_mlp"].strip().lower() == "true"
            inputs["num_tokens"] = int(row["num_tokens"])
            inputs["tp"] = int(row["num_tensor_parallel_workers"])
            inputs["model"] = model
            for op in ops:
                median = _float(row.get(f"time_stats.{op}.median"))
                if median is None or median <= 0:
                    continue
                std = _float(row.get(f"time_stats.{op}.std")) or 0.0
                out.append(make(
                    "operator", median * MS_TO_S, "s", dict(inputs), _provenance(rel, _gpu_name(gpu)),
                    name=op, spread=std * MS_TO_S,
                ))
    return out


def import_collective_csv(path: Path, rel: str) -> list[Observation]:
    """One ``collective`` observation per row of a Vidur all_reduce / send_recv CSV."""
    topology = Path(rel).parent.name
    hardware = f"NVIDIA H100 ({topology})" if topology.startswith("h100") else topology
    out = []
    with open(path, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            name = row["collective"]
            median = _float(row.get(f"time_stats.{name}.median"))
            if median is None or median <= 0:
                continue
            std = _float(row.get(f"time_stats.{name}.std")) or 0.0
            size = int(row["size"])
            inputs = {
                "size_bytes": size * FP16_BYTES, "size_elements": size, "dtype": "fp16",
                "num_workers": int(row["num_workers"]), "devices_per_node": int(row["devices_per_node"]),
                "max_devices_per_node": int(row["max_devices_per_node"]), "topology": topology,
            }
            out.append(make("collective", median * MS_TO_S, "s", inputs, _provenance(rel, hardware),
                            name=name, spread=std * MS_TO_S))
    return out


def import_vidur(root: str | os.PathLike) -> list[Observation]:
    """Walk a Vidur data folder (or one CSV file) and convert every CSV it understands.

    Files are visited in sorted order so the output is deterministic.
    """
    root = Path(root)
    files = [root] if root.is_file() else sorted(root.rglob("*.csv"))
    base = root.parent if root.is_file() else root
    out: list[Observation] = []
    for f in files:
        rel = f.relative_to(base).as_posix()
        if f.name == "mlp.csv":
            out.extend(import_mlp_csv(f, rel))
        elif f.name in ("all_reduce.csv", "send_recv.csv"):
            out.extend(import_collective_csv(f, rel))
    if not out:
        raise ValueError(f"{root}: no Vidur mlp.csv / all_reduce.csv / send_recv.csv found")
    return out
