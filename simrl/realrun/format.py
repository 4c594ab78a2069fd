"""The real-run format (``simrl.realrun.v1``, docs/real-run-format.md): records, reader, writer.

A real run is a header (schema, system, model, notes) and one line per training step. The
reader is strict: every problem is reported with file, line and field, and unknown fields are
errors (a typo must not silently drop a measurement). The writer is deterministic.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs

from simrl.report import _round
from simrl.strictio import INT_MAX, INT_MIN, json_lines, unknown_field_message

SCHEMA = "simrl.realrun.v1"
HEADER_FIELDS = {"schema": str, "system": str, "model": str, "notes": str, "source": str,
                 "instances": int, "kv_capacity_tokens": int}
HEADER_REQUIRED = ("schema", "system", "model")
STEP_REQUIRED = ("step", "start", "end", "train_s", "sync_s", "generated_tokens", "trained_tokens")
STEP_OPTIONAL = ("staleness", "groups", "trajectories", "load")
LOAD_FIELDS = {"t": float, "instance": int, "running": int, "waiting": int, "kv_used": int, "router_queue": int}
LOAD_REQUIRED = ("t", "instance", "running", "waiting")
SLACK_S = 1e-6  # float slack when checking train_s + sync_s <= end - start


class RealRunError(ValueError):
    """A real-run file (or a source converted into one) is malformed; the message names where."""


@attrs.frozen
class LoadSample:
    """One instance's occupancy at time t (seconds on the run's clock)."""

    t: float
    instance: int
    running: int
    waiting: int
    kv_used: int | None = None
    router_queue: int | None = None


@attrs.frozen
class RealStep:
    """One training step: [start, end] on the run's clock; phases train_s and sync_s (seconds).

    The step's wait for a batch is the rest: ``end - start - train_s - sync_s``.
    """

    step: int
    start: float
    end: float
    train_s: float
    sync_s: float
    generated_tokens: int  # completion tokens of requests that finished inside the step
    trained_tokens: int  # trainable (completion) tokens of the step's batch
    staleness: tuple[int, ...] | None = None  # per trained group, when known
    staleness_mean: float | None = None
    staleness_max: int | None = None
    groups: int | None = None
    trajectories: int | None = None
    load: tuple[LoadSample, ...] = ()

    @property
    def step_time(self) -> float:
        return self.end - self.start

    @property
    def wait_s(self) -> float:
        return max(0.0, self.step_time - self.train_s - self.sync_s)


@attrs.frozen
class RealRun:
    system: str
    model: str
    steps: tuple[RealStep, ...]
    notes: str = ""
    source: str = ""
    instances: int | None = None
    kv_capacity_tokens: int | None = None


# -- reading ---------------------------------------------------------------------------------

def _fail(path, line: int, field: str | None, msg: str) -> RealRunError:
    where = f"{path}:{line}" + (f": field {field!r}" if field else "")
    return RealRunError(f"{where}: {msg}")


def _typed(value: Any, kind: type, path, line: int, field: str, minimum: float | None = 0):
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and INT_MIN <= value <= INT_MAX
    elif kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise _fail(path, line, field, f"expected {kind.__name__}, got {json.dumps(value)}")
    if minimum is not None and kind in (int, float) and value < minimum:
        raise _fail(path, line, field, f"must be >= {minimum}, got {value}")
    return float(value) if kind is float else value


def _unknown(obj: dict, known, path, line: int, prefix: str = "") -> None:
    extra = sorted(set(obj) - set(known))
    if extra:
        raise _fail(path, line, prefix + extra[0], unknown_field_message(extra[0], known))


def _header(obj: dict, path) -> dict:
    if obj.get("schema") != SCHEMA:
        raise _fail(path, 1, "schema", f"the first line must be the header with schema {SCHEMA!r}, "
                                       f"got {json.dumps(obj.get('schema'))}")
    _unknown(obj, HEADER_FIELDS, path, 1)
    for f in HEADER_REQUIRED:
        if f not in obj:
            raise _fail(path, 1, f, "missing")
    return {f: _typed(v, HEADER_FIELDS[f], path, 1, f) for f, v in obj.items() if f != "schema"}


def _staleness(value: Any, path, line: int) -> dict:
    if value is None:
        return {}
    if isinstance(value, list):
        vals = tuple(_typed(v, int, path, line, f"staleness[{i}]") for i, v in enumerate(value))
        return {"staleness": vals, "staleness_mean": sum(vals) / len(vals) if vals else None,
                "staleness_max": max(vals, default=None)}
    if isinstance(value, dict):
        _unknown(value, ("mean", "max"), path, line, "staleness.")
        for f in ("mean", "max"):
            if f not in value:
                raise _fail(path, line, f"staleness.{f}", "missing (give mean and max, or a list)")
        mean = _typed(value["mean"], float, path, line, "staleness.mean")
        mx = _typed(value["max"], int, path, line, "staleness.max")
        if mean > mx:
            raise _fail(path, line, "staleness.mean", f"mean {mean} exceeds max {mx}")
        return {"staleness_mean": mean, "staleness_max": mx}
    raise _fail(path, line, "staleness", f"expected a list or {{mean, max}}, got {json.dumps(value)}")


def _load(value: Any, path, line: int) -> tuple[LoadSample, ...]:
    if not isinstance(value, list):
        raise _fail(path, line, "load", "expected a list of samples")
    out = []
    for i, s in enumerate(value):
        if not isinstance(s, dict):
            raise _fail(path, line, f"load[{i}]", "expected an object")
        _unknown(s, LOAD_FIELDS, path, line, f"load[{i}].")
        for f in LOAD_REQUIRED:
            if f not in s:
                raise _fail(path, line, f"load[{i}].{f}", "missing")
        out.append(LoadSample(**{f: None if v is None and f not in LOAD_REQUIRED
                                 else _typed(v, LOAD_FIELDS[f], path, line, f"load[{i}].{f}")
                                 for f, v in s.items()}))
    return tuple(out)


def _step(obj: dict, path, line: int, prev: RealStep | None) -> RealStep:
    _unknown(obj, STEP_REQUIRED + STEP_OPTIONAL, path, line)
    for f in STEP_REQUIRED:
        if f not in obj:
            raise _fail(path, line, f, "missing")
    kinds = {"step": int, "start": float, "end": float, "train_s": float, "sync_s": float,
             "generated_tokens": int, "trained_tokens": int}
    v = {f: _typed(obj[f], k, path, line, f, minimum=None if f in ("start", "end") else 0)
         for f, k in kinds.items()}
    if v["step"] < 1:
        raise _fail(path, line, "step", f"steps count from 1, got {v['step']}")
    if prev is not None and v["step"] != prev.step + 1:
        what = "missing" if v["step"] > prev.step + 1 else "repeated or out of order"
        raise _fail(path, line, "step", f"expected step {prev.step + 1} after {prev.step}, got {v['step']} "
                                        f"(steps {what})")
    if v["end"] < v["start"]:
        raise _fail(path, line, "end", f"end {v['end']} is before start {v['start']}")
    if prev is not None and v["end"] < prev.end:
        raise _fail(path, line, "end", f"step ends at {v['end']}, before step {prev.step} ended ({prev.end})")
    if v["train_s"] + v["sync_s"] > v["end"] - v["start"] + SLACK_S:
        raise _fail(path, line, "train_s", f"train_s + sync_s = {v['train_s'] + v['sync_s']:.6g} s exceeds "
                                           f"the step's end - start = {v['end'] - v['start']:.6g} s")
    for f in ("groups", "trajectories"):
        if obj.get(f) is not None:
            v[f] = _typed(obj[f], int, path, line, f)
    v.update(_staleness(obj.get("staleness"), path, line))
    if obj.get("load") is not None:
        v["load"] = _load(obj["load"], path, line)
    return RealStep(**v)


def read_json_objects(path: str | Path) -> list[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSONL file of objects.

    An unreadable file, a line that is not JSON or not an object raises `RealRunError` naming
    the file and line.
    """
    path = Path(path)

    def fail(line: int, field: str | None, msg: str) -> RealRunError:
        return _fail(path, line, field, msg) if line else RealRunError(f"{path}: {msg}")

    out = []
    for n, obj in json_lines(path, fail):
        if not isinstance(obj, dict):
            raise _fail(path, n, None, "expected a JSON object")
        out.append((n, obj))
    return out


def read_realrun(path: str | Path) -> RealRun:
    """Read and validate a real-run JSONL file; raise `RealRunError` naming file, line and field."""
    path = Path(path)
    header, steps = None, []
    for n, obj in read_json_objects(path):
        if header is None:
            if n != 1:
                raise _fail(path, n, "schema", "the header must be the first line")
            header = _header(obj, path)
            continue
        steps.append(_step(obj, path, n, steps[-1] if steps else None))
    if header is None:
        raise RealRunError(f"{path}: empty file (expected a {SCHEMA} header and step lines)")
    if not steps:
        raise RealRunError(f"{path}: no step lines after the header")
    return RealRun(steps=tuple(steps), **header)


# -- writing ---------------------------------------------------------------------------------

def step_dict(s: RealStep) -> dict:
    d: dict[str, Any] = {f: getattr(s, f) for f in STEP_REQUIRED}
    if s.staleness is not None:
        d["staleness"] = list(s.staleness)
    elif s.staleness_mean is not None:
        d["staleness"] = {"mean": s.staleness_mean, "max": s.staleness_max}
    for f in ("groups", "trajectories"):
        if getattr(s, f) is not None:
            d[f] = getattr(s, f)
    if s.load:
        d["load"] = [{k: v for k, v in attrs.asdict(x).items() if v is not None} for x in s.load]
    return d


def realrun_lines(run: RealRun) -> str:
    head = {"schema": SCHEMA, "system": run.system, "model": run.model}
    for f in ("notes", "source", "instances", "kv_capacity_tokens"):
        if getattr(run, f) not in (None, ""):
            head[f] = getattr(run, f)
    rows = [head, *(step_dict(s) for s in run.steps)]
    return "\n".join(json.dumps(_round(r), sort_keys=True, separators=(",", ":")) for r in rows) + "\n"


def write_realrun(path: str | Path, run: RealRun) -> Path:
    from simrl.atomic import atomic_write

    atomic_write(path, realrun_lines(run))
    return Path(path)


