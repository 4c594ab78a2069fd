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
    return report


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
        (samples if row["kind"] == "sample" else events).append(row)
    if not text:
        raise RunDirError(f"{path}: empty")
    return events, samples


def replot(run_dir: str | Path) -> list[Path]:
    """Re-render a run's plots from its files; return the files written."""
    from simrl.plots import write_plots

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory")
    report = read_report(run_dir)
    events, samples = read_telemetry(run_dir)
    return write_plots(run_dir, report, events, samples)
