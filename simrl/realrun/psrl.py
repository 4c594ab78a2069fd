"""Converting a PSRL run's metric log into the real-run format.

PSRL is built on veRL, so the supported log is veRL's per-step metric dict, one step per line,
in any of three spellings: a JSON object ``{"step": N, "data": {...}}`` (a file logger), a flat
JSON object carrying ``trainer/global_step`` or ``training/global_step``, or veRL's console line
``step:N - key:value - key:value``. Other lines (plain log text) are skipped and counted. The
keys read are listed in `KEYS` and in docs/real-run-format.md. This was written without access
to a real PSRL log: the key names follow veRL's conventions and the docs, not a recorded run.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from simrl.realrun.format import RealRun, RealRunError, _fail, _step
from simrl.report import _round
from simrl.strictio import INT_MAX, StrictInputError, loads

KEYS = {
    "step": ("trainer/global_step", "training/global_step"),
    "step_s": ("timing_s/step",),
    "train_s": ("timing_s/update_actor", "timing_s/train"),
    "sync_s": ("timing_s/sync", "timing_s/update_weights", "timing_s/sync_weights", "timing_s/weight_sync"),
    "trained_tokens": ("psrl/trained_tokens",),
    "generated_tokens": ("psrl/generated_tokens",),
    "staleness_mean": ("psrl/staleness_mean", "async/staleness_mean"),
    "staleness_max": ("psrl/staleness_max", "async/staleness_max"),
    "timestamp": ("timestamp",),
    "load": ("psrl/instance_load",),
}
CONSOLE = re.compile(r"(?:^|\s)step:(\d+)\s+-\s+(.*)$")


def _first(metrics: dict, name: str):
    for k in KEYS[name]:
        if k in metrics and metrics[k] is not None:
            return k, metrics[k]
    return None, None


def _num(value, path, line: int, key: str) -> float:
    """A metric as a finite float; `RealRunError` naming the line and key otherwise."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise _fail(path, line, key, f"expected a number, got {value!r}") from None
    if not math.isfinite(x):
        raise _fail(path, line, key, f"expected a finite number, got {value!r}")
    return x


def _count(value, path, line: int, key: str) -> int:
    x = _num(value, path, line, key)
    if abs(x) > INT_MAX:
        raise _fail(path, line, key, f"expected a count in the 64-bit range, got {value!r}")
    return int(round(x))


def _parse_line(raw: str, path=None, line: int = 0) -> tuple[int, dict] | None:
    """(step, metrics) for a metric line; None for any other log text."""
    s = raw.strip()
    if s.startswith("{"):
        try:
            obj = loads(s)
        except json.JSONDecodeError:
            return None
        except StrictInputError as exc:
            raise _fail(path, line, exc.field, exc.message) from None
        if not isinstance(obj, dict):
            return None
        if isinstance(obj.get("data"), dict) and isinstance(obj.get("step"), int):
            return obj["step"], obj["data"]
        for k in KEYS["step"]:
            if k in obj:
                if type(obj[k]) is not int:
                    raise _fail(path, line, k, f"expected an integer step, got {obj[k]!r}")
                return obj[k], obj
        return None
    m = CONSOLE.search(s)
    if not m:
        return None
    metrics: dict = {}
    for part in m.group(2).split(" - "):
        key, sep, val = part.rpartition(":")
        if sep and key:
            try:
                metrics[key.strip()] = float(val)
            except ValueError:
                metrics[key.strip()] = val.strip()
    return int(m.group(1)), metrics


def _trained_tokens(metrics: dict, path, line: int) -> int:
    _, v = _first(metrics, "trained_tokens")
    if v is not None:
        return _count(v, path, line, "psrl/trained_tokens")
    keys = ("perf/total_num_tokens", "response_length/mean", "prompt_length/mean")
    if all(metrics.get(k) is not None for k in keys):
        total, resp, prompt = (_num(metrics[k], path, line, k) for k in keys)
        if resp + prompt > 0:
            return _count(total * resp / (resp + prompt), path, line, "perf/total_num_tokens")
    raise _fail(path, line, "psrl/trained_tokens", "missing: give psrl/trained_tokens, or perf/total_num_tokens "
                                                   "with response_length/mean and prompt_length/mean")


def from_psrl_log(path: str | Path, model: str = "") -> RealRun:
    """Read a PSRL (veRL-style) metric log; raise `RealRunError` naming file, line and key."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RealRunError(f"{path}: cannot read ({exc.strerror})") from None
    if b"\x00" in raw:
        line = raw[: raw.index(b"\x00")].count(b"\n") + 1
        raise RealRunError(f"{path}:{line}: contains a NUL byte; is this a binary file? expected a text metric log")
    # Console logs may hold stray bytes (progress bars, terminal escapes): undecodable bytes become
    # U+FFFD and such lines are skipped as non-metric text; metric values are still checked strictly.
    text = raw.decode("utf-8", errors="replace")
    merged: dict[int, dict] = {}
    first_line: dict[int, int] = {}
    skipped = 0
    for n, raw in enumerate(text.splitlines(), 1):
        parsed = _parse_line(raw, path, n) if raw.strip() else None
        if parsed is None:
            skipped += bool(raw.strip())
            continue
        step, metrics = parsed
        merged.setdefault(step, {}).update(metrics)  # veRL may log one step's metrics in parts
        first_line.setdefault(step, n)
    if not merged:
        raise RealRunError(f"{path}: no metric lines found (expected veRL-style step metrics with "
                           f"'trainer/global_step' or 'step:N - key:value' lines)")
    notes = []
    clock = 0.0
    steps, prev = [], None
    offset = None
    for step in sorted(merged):
        m, n = merged[step], first_line[step]
        key, step_s = _first(m, "step_s")
        if step_s is None:
            raise _fail(path, n, "timing_s/step", "missing")
        step_s = _num(step_s, path, n, key)
        ts_key, ts = _first(m, "timestamp")
        if ts is not None:
            ts = _num(ts, path, n, ts_key)
            offset = ts - step_s if offset is None else offset
            end = ts - offset
        else:
            end = clock + step_s
        train_key, train_s = _first(m, "train_s")
        if train_s is None:
            raise _fail(path, n, "timing_s/update_actor", "missing")
        sync_key, sync_s = _first(m, "sync_s")
        if sync_key is None and "no sync timing key: sync_s = 0" not in notes:
            notes.append("no sync timing key: sync_s = 0")
        trained = _trained_tokens(m, path, n)
        gen_key, gen = _first(m, "generated_tokens")
        if gen is None and "generated = trained (no psrl/generated_tokens)" not in notes:
            notes.append("generated = trained (no psrl/generated_tokens)")
        smean_key, smean = _first(m, "staleness_mean")
        smax_key, smax = _first(m, "staleness_max")
        _, load = _first(m, "load")
        obj = {"step": step, "start": end - step_s, "end": end, "train_s": _num(train_s, path, n, train_key),
               "sync_s": _num(sync_s, path, n, sync_key) if sync_s is not None else 0.0, "trained_tokens": trained,
               "generated_tokens": _count(gen, path, n, gen_key) if gen is not None else trained,
               "staleness": None if smean is None or smax is None
               else {"mean": _num(smean, path, n, smean_key), "max": _count(smax, path, n, smax_key)},
               "load": load}
        prev = _step(_round(obj), path, n, prev)
        steps.append(prev)
        clock = end
    if skipped:
        notes.append(f"{skipped} non-metric lines skipped")
    return RealRun(system="psrl", model=model, steps=tuple(steps),
                   notes="converted from a PSRL metric log" + "".join(f"; {x}" for x in notes), source=str(path))
