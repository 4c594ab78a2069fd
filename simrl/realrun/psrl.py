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
import re
from pathlib import Path

from simrl.realrun.format import RealRun, RealRunError, _fail, _step
from simrl.report import _round

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


def _parse_line(raw: str) -> tuple[int, dict] | None:
    """(step, metrics) for a metric line; None for any other log text."""
    s = raw.strip()
    if s.startswith("{"):
        try:
            obj = json.loads(s)
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict):
            return None
        if isinstance(obj.get("data"), dict) and isinstance(obj.get("step"), int):
            return obj["step"], obj["data"]
        for k in KEYS["step"]:
            if k in obj:
                return int(obj[k]), obj
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
        return int(round(float(v)))
    total, resp, prompt = (metrics.get(k) for k in ("perf/total_num_tokens", "response_length/mean",
                                                    "prompt_length/mean"))
    if None not in (total, resp, prompt) and float(resp) + float(prompt) > 0:
        return int(round(float(total) * float(resp) / (float(resp) + float(prompt))))
    raise _fail(path, line, "psrl/trained_tokens", "missing: give psrl/trained_tokens, or perf/total_num_tokens "
                                                   "with response_length/mean and prompt_length/mean")


def from_psrl_log(path: str | Path, model: str = "") -> RealRun:
    """Read a PSRL (veRL-style) metric log; raise `RealRunError` naming file, line and key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RealRunError(f"{path}: cannot read ({exc.strerror})") from None
    merged: dict[int, dict] = {}
    first_line: dict[int, int] = {}
    skipped = 0
    for n, raw in enumerate(text.splitlines(), 1):
        parsed = _parse_line(raw) if raw.strip() else None
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
        step_s = float(step_s)
        _, ts = _first(m, "timestamp")
        if ts is not None:
            offset = float(ts) - step_s if offset is None else offset
            end = float(ts) - offset
        else:
            end = clock + step_s
        _, train_s = _first(m, "train_s")
        if train_s is None:
            raise _fail(path, n, "timing_s/update_actor", "missing")
        sync_key, sync_s = _first(m, "sync_s")
        if sync_key is None and "no sync timing key: sync_s = 0" not in notes:
            notes.append("no sync timing key: sync_s = 0")
        trained = _trained_tokens(m, path, n)
        _, gen = _first(m, "generated_tokens")
        if gen is None and "generated = trained (no psrl/generated_tokens)" not in notes:
            notes.append("generated = trained (no psrl/generated_tokens)")
        _, smean = _first(m, "staleness_mean")
        _, smax = _first(m, "staleness_max")
        _, load = _first(m, "load")
        obj = {"step": step, "start": end - step_s, "end": end, "train_s": float(train_s),
               "sync_s": float(sync_s or 0.0), "trained_tokens": trained,
               "generated_tokens": int(round(float(gen))) if gen is not None else trained,
               "staleness": None if smean is None or smax is None
               else {"mean": float(smean), "max": int(round(float(smax)))},
               "load": load}
        prev = _step(_round(obj), path, n, prev)
        steps.append(prev)
        clock = end
    if skipped:
        notes.append(f"{skipped} non-metric lines skipped")
    return RealRun(system="psrl", model=model, steps=tuple(steps),
                   notes="converted from a PSRL metric log" + "".join(f"; {x}" for x in notes), source=str(path))
