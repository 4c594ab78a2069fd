"""Observations: the versioned JSONL records profilers write and cost-model fitters read.

One record per measurement: its ``kind`` (operator, iteration, training_step, collective,
kv_probe, weight_sync), an optional ``name`` (the operator or collective), the ``inputs`` that
produced it (shapes, batch, tokens, KV, layout), the measured ``value`` and its ``spread`` in a
declared ``unit``, and ``provenance`` (hardware, software versions, date, source). Values are
normalised to SI units (seconds, bytes, tokens) when read. Invalid records are rejected with an
`ObservationError` that names the file, line and field. The format is documented in
docs/observations.md; this module is its single implementation.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from typing import Any

import attrs

from simrl.atomic import atomic_write
from simrl.strictio import INT_MAX, INT_MIN, json_lines, unknown_field_message

SCHEMA = "simrl.observation.v1"

KINDS = ("operator", "iteration", "training_step", "collective", "kv_probe", "weight_sync")

# unit -> (quantity, factor to SI)
UNITS: dict[str, tuple[str, float]] = {
    "s": ("time", 1.0),
    "ms": ("time", 1e-3),
    "us": ("time", 1e-6),
    "bytes": ("memory", 1.0),
    "GiB": ("memory", float(2**30)),
    "tokens": ("tokens", 1.0),
}
SI_UNIT = {"time": "s", "memory": "bytes", "tokens": "tokens"}

# Which quantities each kind may measure.
KIND_QUANTITIES = {
    "operator": ("time",),
    "iteration": ("time",),
    "training_step": ("time", "memory"),
    "collective": ("time",),
    "kv_probe": ("tokens",),
    "weight_sync": ("time",),
}

_NUM = (int, float)  # a finite quantity >= 0 (bytes may be written as 1.6e10)
_COUNT = "count"  # an integer >= 0 (tokens, batch sizes): a float is never truncated
_DEGREE = "degree"  # an integer >= 1 (parallel degrees, worker counts, model dimensions)
_SHAPE = {
    "n_embd": _DEGREE, "n_head": _DEGREE, "n_kv_head": _DEGREE, "n_expanded_embd": _DEGREE,
    "vocab_size": _DEGREE, "use_gated_mlp": (bool,),
}
# Required inputs (name -> accepted JSON types) per kind; other keys are allowed and kept.
REQUIRED_INPUTS: dict[str, dict[str, Any]] = {
    "operator": {"num_tokens": _COUNT, "tp": _DEGREE, **_SHAPE},
    "iteration": {"batch_size": _COUNT, "kv_tokens": _COUNT, "prefill_tokens": _COUNT},
    "training_step": {"seq_lens": (list,), "tp": _DEGREE, "pp": _DEGREE, "dp": _DEGREE},
    "collective": {"size_bytes": _NUM, "num_workers": _DEGREE},
    "kv_probe": {"tp": _DEGREE, "pp": _DEGREE},
    "weight_sync": {"bytes": _NUM, "n_instances": _DEGREE},
}
# Inputs the fits read where present (any kind), checked by type when there: a wrong one was a
# ValueError / TypeError traceback in the fit, or read silently ("false" as true).
_TEXT = (str,)
OPTIONAL_INPUTS: dict[str, Any] = {
    "model": _TEXT, "gpu": _TEXT, "device": _TEXT, "dtype": _TEXT, "backend": _TEXT, "framework": _TEXT,
    "topology": _TEXT, "zero_stage": "zero_stage", "activation_checkpointing": (bool,), "buckets": _COUNT,
    "devices_per_node": _DEGREE, "head_dim": _DEGREE,
}
REQUIRED_PROVENANCE = ("hardware", "source", "date")
NAMED_KINDS = ("operator", "collective")  # kinds whose records must carry a name


class ObservationError(ValueError):
    """An invalid observation record; the message names file, line and field."""


@attrs.frozen
class Observation:
    """One measurement, value and spread in SI units (seconds, bytes or tokens)."""

    kind: str
    value: float
    unit: str
    inputs: dict[str, Any]
    provenance: dict[str, Any]
    name: str | None = None
    spread: float = 0.0

    @property
    def quantity(self) -> str:
        return UNITS[self.unit][0]

    def to_dict(self) -> dict:
        rec: dict[str, Any] = {"schema": SCHEMA, "kind": self.kind}
        if self.name is not None:
            rec["name"] = self.name
        rec.update(inputs=self.inputs, value=self.value, spread=self.spread, unit=self.unit,
                   provenance=self.provenance)
        return rec


RECORD_FIELDS = ("schema", "kind", "name", "inputs", "value", "spread", "unit", "provenance")


def _non_finite(value: Any, path: str = "") -> tuple[str, str] | None:
    """(field path, message) of the first NaN/infinite float or out-of-range integer in a record
    built in code (`make`); records read from files were already checked by the strict decoder."""
    if isinstance(value, dict):
        for k, val in value.items():
            bad = _non_finite(val, f"{path}.{k}" if path else str(k))
            if bad:
                return bad
    elif isinstance(value, list | tuple):
        for i, val in enumerate(value):
            bad = _non_finite(val, f"{path}[{i}]")
            if bad:
                return bad
    elif isinstance(value, float) and not math.isfinite(value):
        return path or "<record>", f"expected a finite number, got {value}"
    elif isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
        return path or "<record>", f"expected an integer in the 64-bit range, got {value}"
    return None


def _is_num(x: Any) -> bool:
    return isinstance(x, _NUM) and not isinstance(x, bool) and math.isfinite(x)


def parse_record(rec: Any, where: str = "<record>") -> Observation:
    """Validate one decoded JSON record and return it as an `Observation` in SI units."""

    def fail(field: str, msg: str) -> ObservationError:
        return ObservationError(f"{where}: field {field!r}: {msg}")

    if not isinstance(rec, dict):
        raise fail("<record>", f"expected a JSON object, got {type(rec).__name__}")
    bad = _non_finite(rec)
    if bad is not None:
        raise fail(bad[0], bad[1])
    schema = rec.get("schema")
    if schema != SCHEMA:
        raise fail("schema", f"expected {SCHEMA!r}, got {schema!r}")
    kind = rec.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise fail("kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
    name = rec.get("name")
    if name is not None and not isinstance(name, str):
        raise fail("name", f"expected a string, got {type(name).__name__}")
    if kind in NAMED_KINDS and not name:
        raise fail("name", f"required for kind {kind!r} (the operator or collective name)")
    unit = rec.get("unit")
    if not isinstance(unit, str) or unit not in UNITS:  # (a list or an object is unhashable: a TypeError)
        raise fail("unit", f"expected one of {', '.join(UNITS)}, got {unit!r}")
    quantity, factor = UNITS[unit]
    if quantity not in KIND_QUANTITIES[kind]:
        raise fail("unit", f"{unit!r} measures {quantity}, which kind {kind!r} does not record")
    for key in ("value", "spread"):
        if key not in rec:
            if key == "spread":
                continue
            raise fail(key, "missing")
        val = rec[key]
        if not _is_num(val) or val < 0:
            raise fail(key, f"expected a finite number >= 0, got {val!r}")
    if rec["value"] <= 0 and quantity == "time":
        raise fail("value", f"a time must be > 0, got {rec['value']!r}")
    inputs = rec.get("inputs")
    if not isinstance(inputs, dict):
        raise fail("inputs", "missing or not an object")
    for key, types in REQUIRED_INPUTS[kind].items():
        if key not in inputs:
            raise fail(f"inputs.{key}", f"missing (required for kind {kind!r})")
        val = inputs[key]
        if types is _NUM:
            ok, expected = _is_num(val) and val >= 0, "a finite number >= 0"
        elif types in (_COUNT, _DEGREE):
            low = 0 if types is _COUNT else 1
            ok, expected = type(val) is int and val >= low, f"an integer >= {low}"
        else:
            ok, expected = isinstance(val, types), " or ".join(t.__name__ for t in types)
        if not ok:
            raise fail(f"inputs.{key}", f"expected {expected}, got {val!r}")
    for key, types in OPTIONAL_INPUTS.items():
        if key not in inputs or key in REQUIRED_INPUTS[kind] or inputs[key] is None:
            continue
        val = inputs[key]
        if types == "zero_stage":
            ok, expected = type(val) is int and val in (0, 1, 2, 3), "0, 1, 2 or 3"
        elif types in (_COUNT, _DEGREE):
            low = 0 if types is _COUNT else 1
            ok, expected = type(val) is int and val >= low, f"an integer >= {low}"
        elif types == (bool,):
            ok, expected = type(val) is bool, "true or false"
        else:
            ok, expected = isinstance(val, types), "a string"
        if not ok:
            raise fail(f"inputs.{key}", f"expected {expected}, got {val!r:.40}")
    if kind == "training_step" and (
        not inputs["seq_lens"] or not all(type(s) is int and s > 0 for s in inputs["seq_lens"])
    ):
        raise fail("inputs.seq_lens", "expected a non-empty list of integer lengths >= 1")
    prov = rec.get("provenance")
    if not isinstance(prov, dict):
        raise fail("provenance", "missing or not an object")
    for key in REQUIRED_PROVENANCE:
        if not isinstance(prov.get(key), str) or not prov[key]:
            raise fail(f"provenance.{key}", "missing or not a non-empty string")
    extra = sorted(set(rec) - set(RECORD_FIELDS))
    if extra:
        raise fail(extra[0], unknown_field_message(extra[0], RECORD_FIELDS))
    return Observation(
        kind=kind, name=name, inputs=dict(inputs), provenance=dict(prov),
        value=float(rec["value"]) * factor, spread=float(rec.get("spread", 0.0)) * factor,
        unit=SI_UNIT[quantity],
    )


def read_observations(path: str | os.PathLike) -> list[Observation]:
    """Read and validate a JSONL file; blank lines are skipped. Raises `ObservationError`."""
    def fail(line: int, field: str | None, msg: str) -> ObservationError:
        where = f"{path}:{line}" if line else str(path)
        return ObservationError(f"{where}: {'field ' + repr(field) + ': ' if field else ''}{msg}")

    out = [parse_record(rec, f"{path}:{lineno}") for lineno, rec in json_lines(path, fail)]
    if not out:  # an empty file (or only blank lines) is a failed profile or a wrong path, never data
        raise fail(0, None, "no observation records (the file is empty); expected one JSON record per line")
    return out


def read_many(paths: Iterable[str | os.PathLike]) -> list[Observation]:
    out: list[Observation] = []
    for p in paths:
        out.extend(read_observations(p))
    return out


def write_observations(path: str | os.PathLike, observations: Iterable[Observation]) -> int:
    """Write observations as JSONL atomically (temp file + os.replace); returns the count."""
    lines = [json.dumps(ob.to_dict(), sort_keys=True) + "\n" for ob in observations]
    atomic_write(path, "".join(lines))
    n = len(lines)
    return n


def make(kind: str, value: float, unit: str, inputs: dict, provenance: dict, name: str | None = None,
         spread: float = 0.0) -> Observation:
    """Build and validate one observation in code (profilers, tests, synthetic data)."""
    rec = {"schema": SCHEMA, "kind": kind, "inputs": inputs, "value": value, "spread": spread,
           "unit": unit, "provenance": provenance}
    if name is not None:
        rec["name"] = name
    return parse_record(rec)
