"""Run plots: seven views of a run, as altair charts written to HTML and, optionally, PNG (vl-convert).

`write_plots(run_dir, report, events, samples, png=...)` writes ``<run>/plots/<view>.html`` (and
``.png``) for the views in `PLOT_NAMES` (docs/plots.md). HTML is always written (milliseconds);
PNG rendering costs seconds per run, so `srl` writes PNGs only with ``--png`` and `srl-plot`
writes them by default (benchmarks/plots.py measures both). Inputs are rounded exactly as report.json and
telemetry.jsonl round them, so `srl-plot` re-rendering from those files gives byte-identical
output. `write_realrun_plots` draws the same views for a real run where its data allow.
altair and vl-convert are imported only when something is drawn.
"""

from __future__ import annotations

import os
from pathlib import Path

PLOT_NAMES = ("instance_load", "timeline", "staleness", "throughput", "step_breakdown", "distributions",
              "queue_depth")
PLOT_TITLES = {"instance_load": "Instance load", "timeline": "Timeline", "staleness": "Staleness",
               "throughput": "Throughput per step", "step_breakdown": "Step time breakdown",
               "distributions": "Latency and completion lengths", "queue_depth": "Queue and buffer depth"}


def sample_rows(samples) -> list[dict]:
    """Occupancy samples as telemetry rows (tuples from the engine, or rows already read back)."""
    from simrl.report import _round

    out = []
    for s in samples:
        if not isinstance(s, dict):
            s = {"t": s[0], "kind": "sample", "inst": s[1], "waiting": s[2], "running": s[3],
                 "kv_used": s[4], "router_queue": s[5]}
        out.append(_round(s))
    out.sort(key=lambda r: r["t"])  # stable: the order telemetry.jsonl has them in
    return out


def sync_mode(run_dir: str | os.PathLike) -> str:
    """How rollout pauses for weight updates in this run, from its config.yaml (docs/model.md).

    One of ``global``, ``drain``, ``colocated``, ``per_instance``, ``continue``, ``unknown``.
    """
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return "unknown"
    from simrl.config import ConfigError, load_config
    from simrl.policy.rules import InflightRule, Placement, SyncScope

    try:
        cfg = load_config(str(path))
    except (ConfigError, ValueError, TypeError):
        return "unknown"
    sync = cfg.policy.sync_spec
    if (sync.placement or cfg.deployment.placement) == Placement.COLOCATED:
        return "colocated"
    if sync.scope is SyncScope.PER_INSTANCE:
        return "per_instance"
    if sync.rule is InflightRule.CONTINUE:
        return "continue"
    return "drain" if sync.rule is InflightRule.DRAIN else "global"


def render_views(data, plot_dir: Path, skipped: dict[str, str] | None = None,
                 placeholders: bool = True, png: bool = True) -> tuple[list[Path], dict[str, str]]:
    """Render every view of `PlotData`; a view without data gets a placeholder or is skipped."""
    from simrl.plots import charts, depth
    from simrl.plots.render import placeholder, render

    views = {**charts.VIEWS, "queue_depth": depth.queue_depth}

    skipped = dict(skipped or {})
    paths: list[Path] = []
    for name in PLOT_NAMES:
        ds = charts.Datasets()
        chart = None if name in skipped else views[name](ds, data)
        if chart is None:
            why = skipped.setdefault(name, "no data for this view")
            if not placeholders:
                continue
            chart = placeholder(f"{PLOT_TITLES[name]}: nothing to show", why)
        paths += render(chart, plot_dir, name, ds.values, png=png)
    return paths, skipped


def write_plots(out_dir, report, events, samples, png: bool = True, plot_dir=None) -> list[Path]:
    """Write the seven plots of a simulated run under ``out_dir/plots`` (HTML, and PNG when ``png``),
    or under ``plot_dir`` where given (a staging folder; ``out_dir`` is still the run directory whose
    config.yaml says how rollout pauses); return the files written.

    ``report`` is a `Report` or the dict of report.json; ``events`` and ``samples`` are the
    engine's telemetry (or the rows read back from telemetry.jsonl).
    """
    from simrl.plots.data import from_sim
    from simrl.report import _round

    report_d = report if isinstance(report, dict) else report.to_dict()
    evs = [_round(e) for e in events if e.get("kind") != "sample"]
    data = from_sim(report_d, evs, sample_rows(samples), sync_mode(out_dir))
    paths, _ = render_views(data, Path(plot_dir) if plot_dir is not None else Path(out_dir) / "plots", png=png)
    return paths


def write_realrun_plots(run, out_dir, title: str) -> tuple[list[Path], dict[str, str]]:
    """Plot a `RealRun` with the same views where its data allow; return files and skipped views."""
    from simrl.plots.data import from_realrun

    data, skipped = from_realrun(run, title)
    return render_views(data, Path(out_dir), skipped, placeholders=False)
