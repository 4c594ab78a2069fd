"""The open hardware and model catalog: data files shipped with the package, and their readers.

- ``gpus.yaml``: one entry per accelerator (datasheet figures, each entry with its ``source``).
- ``models/<org>--<name>.json``: copies of Hugging Face ``config.json`` files, by repo id.

Adding a GPU or a model is a data change: a new YAML entry or a new ``config.json`` copy (or, at run
time, a path to one in the run configuration). `parse_quantity` reads the unit-suffixed numbers the
YAML uses ("989 TFLOPS", "80 GiB", "3.35 TB/s", "400 Gb/s").
"""

from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path

from simrl.cost.base import CostModelError

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_QTY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")


def parse_quantity(value: object, kind: str, where: str) -> float:
    """A number, or a string with a unit, as a float in base units (FLOP/s, bytes or bytes/s).

    ``kind`` is "flops" (FLOPS, TFLOPS, PFLOPS ...), "bytes" (B, GB, GiB ...) or "bandwidth"
    (B/s, GB/s, TB/s, GiB/s, and network bit rates Gb/s, Gbps). ``where`` names the file and key
    for the error message.
    """
    if isinstance(value, bool):
        raise CostModelError(f"{where}: expected a number or a quantity string, got {value!r}")
    if isinstance(value, int | float):
        out = float(value)
    elif isinstance(value, str):
        m = _QTY.match(value)
        if not m:
            raise CostModelError(f"{where}: cannot read {value!r} as a {kind} quantity (e.g. {_example(kind)})")
        out = float(m.group(1)) * _unit_scale(m.group(2), kind, where, value)
    else:
        raise CostModelError(f"{where}: expected a number or a quantity string, got {type(value).__name__}")
    if not math.isfinite(out) or out <= 0:
        raise CostModelError(f"{where}: must be a finite number > 0, got {value!r}")
    return out


def _example(kind: str) -> str:
    return {"flops": "'989 TFLOPS'", "bytes": "'80 GiB'", "bandwidth": "'3.35 TB/s' or '400 Gb/s'"}[kind]


def _unit_scale(unit: str, kind: str, where: str, raw: str) -> float:
    if unit == "":
        return 1.0
    bad = CostModelError(f"{where}: unit of {raw!r} is not a {kind} unit (e.g. {_example(kind)})")
    if kind == "flops":
        if not unit.upper().endswith("FLOPS"):
            raise bad
        pre = unit[: -len("FLOPS")]
        if pre.upper() not in ("", "K", "M", "G", "T", "P", "E"):
            raise bad
        return _PREFIX[pre.upper()]
    if kind == "bytes":
        return _byte_scale(unit, bad)
    if kind == "bandwidth":
        if unit.endswith("bps"):  # network rate in bits
            return _bit_scale(unit[:-3], bad)
        if not unit.endswith("/s"):
            raise bad
        base = unit[:-2]
        if base.endswith("b"):
            return _bit_scale(base[:-1], bad)
        return _byte_scale(base, bad)
    raise bad


def _byte_scale(unit: str, bad: Exception) -> float:
    if not unit.endswith("B"):
        raise bad
    pre = unit[:-1]
    if pre in _BIN:
        return _BIN[pre]
    if pre in _PREFIX:
        return _PREFIX[pre]
    raise bad


def _bit_scale(pre: str, bad: Exception) -> float:
    if pre not in _PREFIX:
        raise bad
    return _PREFIX[pre] / 8.0


def data_path(name: str) -> Path:
    """Path of a file shipped in this package (``gpus.yaml``, ``models/...``)."""
    return Path(str(resources.files(__name__).joinpath(name)))
