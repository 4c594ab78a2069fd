"""Reading a run directory back (report.json, telemetry.jsonl) to re-render its plots.

`replot(run_dir)` is what `srl-plot` runs: it feeds the files' rows to `write_plots`, which
sees exactly the rounded numbers the run itself plotted, so the files come out byte-identical.
Every problem names the file (and line) at fault.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from simrl.output import TELEMETRY_SCHEMA
from simrl.report import REPORT_SCHEMA
from workloads.strictio import StrictInputError, unique_pairs


class RunDirError(ValueError):
    """A run directory is missing a file, or a file is corrupt; the message names it."""


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> RunDirError:
    line = path.read_bytes()[: exc.start].count(b"\n") + 1
    return RunDirError(f"{path}:{line}: corrupt, not UTF-8 text (byte 0x{exc.object[exc.start:exc.start + 1].hex()})")


def _loads(path: Path, text: str, line: int | None = None):
    """JSON as the run wrote it (NaN stands for an undefined metric, so it is kept), but a repeated
    key or nesting too deep is a corrupt file, not a traceback or a silently dropped value."""
    where = f"{path}:{line}" if line else str(path)
    try:
        return json.loads(text, object_pairs_hook=unique_pairs)
    except StrictInputError as exc:
        raise RunDirError(f"{where}: corrupt, {exc.message}") from None
    except RecursionError:
        raise RunDirError(f"{where}: corrupt, JSON nested too deeply") from None


def read_report(run_dir: Path) -> dict:
    path = run_dir / "report.json"
    try:
        report = _loads(path, path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(f"{path}: missing (is {run_dir} a SimRL run directory?)") from None
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}:{exc.lineno}: corrupt, not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    if not isinstance(report, dict) or report.get("schema") != REPORT_SCHEMA:
        got = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise RunDirError(f"{path}: expected schema {REPORT_SCHEMA!r}, got {got!r}")
    for key in ("steps", "calls", "instances", "run_name"):
        if key not in report:
            raise RunDirError(f"{path}: corrupt, no {key!r}")
    check_report_fields(report, path)
    return report


# -- the fields the plots and the real-run export read, by kind (a wrong one was a KeyError or
# TypeError traceback half-way through the plots, with some of them already written).
# Kinds: "time" a finite number >= 0; "count" an integer >= 0; "int" any integer; "number" a finite
# number; "text" a string; "ints" a list of integers; a trailing "?" allows null.

_STEP_FIELDS = {"step": "int", "wait_start": "time", "batch_ready": "time", "train_start": "time",
                "train_end": "time", "publish_end": "time", "trained_completion_tokens": "count",
                "staleness": "ints", "groups": "count", "trajectories": "count"}
_STEP_OPTIONAL = {"gids": "ints"}
_CALL_FIELDS = {"arrival": "time", "finish": "time?", "generated_tokens": "count"}
_INSTANCE_FIELDS = {"kv_capacity_tokens": "count?"}
_TOTALS_OPTIONAL = {"makespan_s": "time?", "router_queue_at_end": "count?"}
# telemetry rows by kind (fields read when present; "sample" rows need all of theirs)
_SAMPLE_FIELDS = {"inst": "count", "running": "count", "waiting": "count", "kv_used": "number",
                  "router_queue": "count?"}
_EVENT_OPTIONAL = {"inst": "int?", "gid": "int?", "verdict": "text?"}
_EVENT_REQUIRED = {"pull_start": {"inst": "int"}, "pull_end": {"inst": "int"}, "group_dispatch": {"gid": "int"},
                   "group_done": {"gid": "int"}, "buffer_drop": {"gid": "int"}}


def _kind_error(value, kind: str) -> str | None:
    """What is wrong with ``value`` for ``kind`` (None: it fits)."""
    if kind.endswith("?"):
        if value is None:
            return None
        kind = kind[:-1]
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind in ("int", "count"):
        if type(value) is not int or (kind == "count" and value < 0):
            return f"expected {'an integer >= 0' if kind == 'count' else 'an integer'}"
    elif kind in ("time", "number"):
        if not number or not math.isfinite(value) or (kind == "time" and value < 0):
            return f"expected {'a finite time >= 0' if kind == 'time' else 'a finite number'}"
    elif kind == "text":
        if not isinstance(value, str):
            return "expected a string"
    elif kind == "ints":
        if not isinstance(value, list) or not all(type(x) is int for x in value):
            return "expected a list of integers"
    return None


def _check_fields(obj, required: dict, optional: dict, where: str) -> None:
    if not isinstance(obj, dict):
        raise RunDirError(f"{where}: corrupt, expected an object, got {type(obj).__name__}")
    for key, kind in {**optional, **required}.items():
        if key not in obj:
            if key in required and not kind.endswith("?"):
                raise RunDirError(f"{where}.{key}: corrupt, missing ({_kind_error(None, kind)})")
            continue
        why = _kind_error(obj[key], kind)
        if why:
            raise RunDirError(f"{where}.{key}: corrupt, {why}, got {obj[key]!r:.40}")


def check_report_fields(report: dict, path) -> None:
    """Every field of report.json the plots and the real-run export read has its kind; else a
    `RunDirError` naming the file and the key path (``steps[2].train_end``)."""
    for key in ("steps", "calls", "instances"):
        if not isinstance(report[key], list):
            raise RunDirError(f"{path}: {key}: corrupt, expected a list, got {type(report[key]).__name__}")
    if not isinstance(report["run_name"], str):
        raise RunDirError(f"{path}: run_name: corrupt, expected a string, got {report['run_name']!r:.40}")
    for i, st in enumerate(report["steps"]):
        _check_fields(st, _STEP_FIELDS, _STEP_OPTIONAL, f"{path}: steps[{i}]")
    for i, c in enumerate(report["calls"]):
        _check_fields(c, _CALL_FIELDS, {}, f"{path}: calls[{i}]")
    for i, inst in enumerate(report["instances"]):
        _check_fields(inst, {}, _INSTANCE_FIELDS, f"{path}: instances[{i}]")
    if "totals" in report:
        _check_fields(report["totals"], {}, _TOTALS_OPTIONAL, f"{path}: totals")
    depth = report.get("queue_depth", [])
    if not isinstance(depth, list):
        raise RunDirError(f"{path}: queue_depth: corrupt, expected a list, got {type(depth).__name__}")
    for i, row in enumerate(depth):
        ok = (isinstance(row, list) and len(row) == 5 and all(_kind_error(x, "number") is None for x in row[:4])
              and isinstance(row[4], dict) and all(isinstance(k, str) and k.lstrip("-").isdigit()
                                                   and _kind_error(v, "number") is None for k, v in row[4].items()))
        if not ok:
            raise RunDirError(f"{path}: queue_depth[{i}]: corrupt, expected [t, in flight, buffered, training, "
                              f"{{version: buffered}}], got {row!r:.60}")


def check_telemetry_row(row: dict, path, line: int) -> None:
    """The fields the plots read of one telemetry row (a sample, or an event by its kind)."""
    if row["kind"] == "sample":
        _check_fields(row, _SAMPLE_FIELDS, {}, f"{path}:{line}: sample")
    else:
        _check_fields(row, _EVENT_REQUIRED.get(row["kind"], {}), _EVENT_OPTIONAL, f"{path}:{line}: {row['kind']}")


def read_telemetry(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """(events, samples) of telemetry.jsonl, in file order."""
    path = run_dir / "telemetry.jsonl"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunDirError(f"{path}: missing (the run was made with run.telemetry=false; "
                          "rerun with telemetry to plot it)") from None
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    events, samples = [], []
    for n, raw in enumerate(text.splitlines(), 1):
        try:
            row = _loads(path, raw, n)
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{path}:{n}: corrupt, not valid JSON ({exc.msg})") from None
        if n == 1:
            if not isinstance(row, dict) or row.get("schema") != TELEMETRY_SCHEMA:
                raise RunDirError(f"{path}:1: expected the header {{\"schema\": \"{TELEMETRY_SCHEMA}\"}}")
            continue
        if not isinstance(row, dict) or "kind" not in row or "t" not in row:
            raise RunDirError(f"{path}:{n}: corrupt, expected an event with 't' and 'kind'")
        t = row["t"]
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
            raise RunDirError(f"{path}:{n}: corrupt, 't' must be a finite time >= 0, got {t!r:.40}")
        if not isinstance(row["kind"], str):
            raise RunDirError(f"{path}:{n}: corrupt, 'kind' must be a string, got {row['kind']!r:.40}")
        check_telemetry_row(row, path, n)
        (samples if row["kind"] == "sample" else events).append(row)
    if not text:
        raise RunDirError(f"{path}: empty")
    return events, samples


def replot(run_dir: str | Path) -> list[Path]:
    """Re-render a run's plots from its files; return the files written."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory")
    report = read_report(run_dir)
    events, samples = read_telemetry(run_dir)
    return _staged_plots(run_dir, report, events, samples)


def _staged_plots(run_dir: Path, report: dict, events: list, samples: list) -> list[Path]:
    """`write_plots` into a staging folder, then moved into ``run_dir/plots``: a run that cannot be
    plotted (fields consistent one by one but not together) leaves no partial plots behind."""
    import os
    import shutil
    import tempfile

    from simrl.plots import write_plots

    staging = Path(tempfile.mkdtemp(prefix=".plots-", dir=run_dir))
    try:
        try:
            staged = write_plots(run_dir, report, events, samples, plot_dir=staging / "plots")
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise RunDirError(f"{run_dir}: report.json and telemetry.jsonl do not fit together, cannot plot "
                              f"({type(exc).__name__}: {exc}); was the directory edited?") from None
        final = run_dir / "plots"
        final.mkdir(exist_ok=True)
        out = []
        for p in staged:
            dest = final / p.relative_to(staging / "plots")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(p, dest)
            out.append(dest)
        return out
    finally:
        shutil.rmtree(staging, ignore_errors=True)
