"""What `srl-sweep` writes: tables (CSV, Parquet when pyarrow is installed), plots, a report.

``OUT/points.csv`` (every point: variables, status, reason, engine, objectives, binding limit,
the Pareto flag), ``OUT/points.parquet`` (same, with pyarrow), ``OUT/pareto.csv``,
``OUT/recheck.csv`` (the top-k on the oracle), ``OUT/sweep.html`` and ``OUT/sweep.png`` (the
Pareto scatter, a heatmap of the best value over two variables, and the crossover lines),
``OUT/report.md``, and ``OUT/timing.json`` (wall times; the only file that varies run to run).
Every write is atomic (`simrl.atomic`); floats are rounded to 9 significant digits so the same
space and seed give byte-identical files.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np  # (np.float64 cells)

from simrl.atomic import atomic_write
from simrl_explore.space import OBJECTIVES
from simrl_explore.sweep import SweepResult


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return float(f"{v:.9g}")
    return v


def _csv_cell(text: str) -> str:
    """A field as `csv.writer` (QUOTE_MINIMAL, ``"`` doubled) writes it in a row of several fields."""
    if "," in text or '"' in text or "\n" in text or "\r" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def column_cells(values: list) -> list[str]:
    """One column's CSV fields, as `table_text` has always written them (`csv.DictWriter` of
    ``_fmt(value)``): a column of floats (NaN or missing allowed) or of plain ints by one
    comprehension each (a float rounded to 9 significant digits by ``%.9g`` and written as
    ``repr`` writes it; NaN and missing: the empty field), anything else (text, flags, mixed)
    value by value through `_fmt` and the CSV quoting. (numpy's ``%.9g`` and float-to-string are
    slower than these comprehensions: 134 ms against 26 ms for 10,000 floats.)"""
    kinds = set(map(type, values))
    if kinds <= {float, np.float64, str} and all(v == "" for v in values if type(v) is str):
        return ["" if type(v) is str or v != v else str(float(f"{v:.9g}")) for v in values]
    if kinds == {int}:
        return [str(v) for v in values]
    return [_csv_cell("" if v is None else str(_fmt(v))) for v in values]


def table_text(rows: list[dict], columns: list[str]) -> str:
    """The CSV table (header, then one line per row), built column by column: the same bytes as
    `csv.DictWriter` writing ``_fmt`` of each cell (tests/explore/test_sweep_setup.py)."""
    cols = [column_cells([r.get(c, "") for r in rows]) for c in columns]
    head = ",".join(_csv_cell(c) for c in columns)
    if len(columns) == 1:  # (csv quotes a lone empty field)
        cols = [['""' if v == "" else v for v in cols[0]]]
    return "\n".join([head, *map(",".join, zip(*cols, strict=True))]) + "\n"


def write_parquet(path: str, rows: list[dict], columns: list[str]) -> bool:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    cols: dict[str, list] = {}
    for c in columns:  # column by column: "" (missing) and NaN are nulls
        vals = [r.get(c) for r in rows]
        cols[c] = [None if (type(v) is str and v == "") or (isinstance(v, float) and v != v) else v for v in vals]
    arrays = {}
    for c, vals in cols.items():
        try:
            arrays[c] = pa.array(vals)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays[c] = pa.array([None if v is None else str(v) for v in vals])
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table(arrays), buf, compression="zstd")
    atomic_write(path, buf.getvalue().to_pybytes())
    return True


def _label(name: str) -> str:
    return {"step_time_s": "step time (s)", "trained_tokens_per_s": "trained tokens/s",
            "gpu_hours_per_1k_steps": "GPU-hours per 1k steps", "staleness_mean": "mean staleness"}.get(name, name)


def sweep_chart(res: SweepResult):
    """(The altair chart: Pareto scatter | best-value heatmap | crossover lines (one per y value),
    its named datasets ``points`` and ``best``), or None without a completed point."""
    import altair as alt

    space = res.space
    ok = res.ok()
    if not ok:
        return None
    vars_ = [a.name for a in space.axes] or space.variable_names
    x = space.plot.get("x", vars_[0])
    y = space.plot.get("y", vars_[1] if len(vars_) > 1 else vars_[0])
    color_obj = space.plot.get("color", space.rank_by)
    direction, ccol = OBJECTIVES[color_obj]
    recs = [{**{k: _fmt(v) for k, v in r.items()}, "pareto": "Pareto front" if r.get("pareto") else "dominated"}
            for r in ok]
    # The rows go into the spec's top-level datasets after altair has built it (`sweep_spec`): altair
    # walks and validates inline values object by object (~50 s for 10,000 points on this machine).
    df = alt.Data(name="points")
    tip = [x, y, "step_time_s", "trained_tokens_per_s", "gpu_hours_per_1k_steps", "staleness_mean", "binding",
           "engine"]
    tip = [f"{t}:N" if t in ("binding", "engine") else f"{t}:Q" for t in tip if t in recs[0]]
    scatter = alt.Chart(df).mark_point(filled=True).encode(
        x=alt.X("gpu_hours_per_1k_steps:Q", title=_label("gpu_hours_per_1k_steps"), scale=alt.Scale(zero=False)),
        y=alt.Y("trained_tokens_per_s:Q", title=_label("trained_tokens_per_s"), scale=alt.Scale(zero=False)),
        color=alt.Color("binding:N", title="binding limit"),
        shape=alt.Shape("pareto:N", title=""),
        size=alt.condition(alt.datum.pareto == "Pareto front", alt.value(90), alt.value(18)),
        tooltip=tip,
    ).properties(title="objectives (filled large: Pareto front)", width=340, height=280)
    # Best value per (x, y) over the other axes, with the binding limit of that best point.
    sign = 1 if direction == "min" else -1
    chosen: dict[tuple, dict] = {}
    for r in sorted(recs, key=lambda r: (sign * r[ccol], r["point"])):
        chosen.setdefault((r[x], r[y]), r)
    best_rows = [chosen[k] for k in sorted(chosen, key=str)]
    best = alt.Data(name="best")
    heat = alt.Chart(best).mark_rect().encode(
        x=alt.X(f"{x}:O", title=x), y=alt.Y(f"{y}:O", title=y),
        color=alt.Color(f"{ccol}:Q", title=f"best {_label(ccol)}",
                        scale=alt.Scale(scheme="viridis", reverse=(direction == "min"))),
        tooltip=[f"{x}:O", f"{y}:O", f"{ccol}:Q", "binding:N"],
    ).properties(title=f"best {_label(ccol)} over the other axes", width=300, height=280)
    text = alt.Chart(best).mark_text(fontSize=9, color="white").encode(
        x=f"{x}:O", y=f"{y}:O", text=alt.Text("binding:N"))
    lines = alt.Chart(best).mark_line(point=True).encode(
        x=alt.X(f"{x}:Q", title=x), y=alt.Y(f"{ccol}:Q", title=_label(ccol), scale=alt.Scale(zero=False)),
        color=alt.Color(f"{y}:N", title=y), tooltip=[f"{x}:Q", f"{y}:N", f"{ccol}:Q", "binding:N"],
    )
    marks = alt.Chart(best).mark_point(size=70, filled=True).encode(
        x=f"{x}:Q", y=f"{ccol}:Q", shape=alt.Shape("binding:N", title="binding limit"),
        color=alt.Color(f"{y}:N"))
    cross = (lines + marks).properties(title=f"crossover: best {_label(ccol)} by {x}", width=340, height=280)
    chart = alt.hconcat(scatter, heat + text, cross).properties(
        title=f"srl-sweep {space.name}: {len(ok)} feasible points").resolve_scale(color="independent",
                                                                                 shape="independent")
    return chart, {"points": recs, "best": best_rows}


def sweep_spec(res: SweepResult) -> dict | None:
    """The Vega-Lite spec of `sweep_chart`, its rows in the top-level ``datasets``."""
    built = sweep_chart(res)
    if built is None:
        return None
    chart, datasets = built
    spec = chart.to_dict()
    # a non-finite value (an axis of .inf, "no limit" for run.time_horizon_s) is null: JSON has no
    # Infinity, and the PNG renderer refused the whole spec
    spec["datasets"] = {k: [{c: (None if isinstance(v, float) and not math.isfinite(v) else v)
                             for c, v in r.items()} for r in rows] for k, rows in datasets.items()}
    return spec


def write_plots(res: SweepResult, out: str) -> list[str]:
    spec = sweep_spec(res)
    if spec is None:
        return []
    import altair as alt
    from altair.utils.html import spec_to_html

    written = []
    html = spec_to_html(spec, mode="vega-lite", vega_version=alt.VEGA_VERSION,
                        vegaembed_version=alt.VEGAEMBED_VERSION, vegalite_version=alt.VEGALITE_VERSION)
    atomic_write(os.path.join(out, "sweep.html"), html)
    written.append("sweep.html")
    try:
        import vl_convert as vlc

        png = vlc.vegalite_to_png(json.dumps(spec), scale=1.5)
        atomic_write(os.path.join(out, "sweep.png"), png)
        written.append("sweep.png")
    except ImportError:
        pass
    return written


def _md_table(rows: list[dict], cols: list[str]) -> str:
    if not rows:
        return "(none)\n"
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report_md(res: SweepResult) -> str:
    s = res.space
    vars_ = [a.name for a in s.axes] + [d.name for d in s.derived]
    rows = res.rows
    n_ok = len(res.ok())
    lines = [f"# srl-sweep: {s.name}", ""]
    if s.question:
        lines += [f"Question: {s.question}", ""]
    lines += [f"{len(rows)} points: {n_ok} simulated to completion, "
              f"{sum(1 for r in rows if r.get('status') == 'dropped')} dropped as infeasible, "
              f"{sum(1 for r in rows if r.get('status') == 'failed')} failed.", ""]
    lines += ["## Engines", ""]
    for eng, n in sorted(res.engines.items()):
        lines.append(f"- {eng}: {n} points" + (" (costs linearised for the fast path: see docs/search.md)"
                                              if eng == "fast" and any("surrogate_rollout_med_err" in r for r in rows)
                                              else ""))
    if res.fallbacks:
        lines += ["", "Points the fast path could not take ran on the SimPy engine:", ""]
        lines += [f"- {n} x {why}" for why, n in res.fallbacks.most_common()]
    inert = res.inert_axes()
    if inert:
        lines += ["", f"**Axes that change no simulated outcome** (step time, tokens/s and staleness tie for every value "
                  f"at every setting of the other axes; they may still decide feasibility and GPU count): "
                  f"{', '.join(inert)}."]
    if res.dropped:
        lines += ["", "## Dropped (infeasible)", ""]
        lines += [f"- {n} x {why}" for why, n in res.dropped.most_common()]
    objs = [OBJECTIVES[o][1] for o in s.objectives]
    front = sorted(res.front(), key=lambda r: r[OBJECTIVES[s.rank_by][1]] * (1 if OBJECTIVES[s.rank_by][0] == "min" else -1))
    lines += ["", f"## Pareto front ({len(front)} points; objectives: "
              f"{', '.join(f'{o} ({OBJECTIVES[o][0]})' for o in s.objectives)})", ""]
    lines.append(_md_table(front[:30], ["point", *vars_, *objs, "binding", "engine"]))
    lines += [f"## Top {s.top_k} by {s.rank_by}", ""]
    lines.append(_md_table(res.ranked()[: s.top_k], ["point", *vars_, *objs, "binding", "engine"]))
    lines += ["## Oracle re-check of the top-k (SimPy, the points' own costs)", ""]
    if res.recheck:
        ok = sum(c["agrees"] for c in res.recheck)
        lines.append(f"{ok}/{len(res.recheck)} agree within {s.recheck_tolerance:.0%} on step time and "
                     "trained tokens/s with the same binding limit.\n")
        lines.append(_md_table(res.recheck, ["rank", "simpy_rank", "point", "fast_step_time_s", "simpy_step_time_s",
                                             "step_time_rel_err", "tokens_rel_err", "fast_binding", "simpy_binding",
                                             "agrees"]))
    else:
        lines.append("No fast-path points: every point already ran on the SimPy engine.\n")
    lines += ["## Binding limit", "",
              "Over training steps 2..K the trainer either waits for a batch (`rollout`), trains (`training`) "
              "or publishes weights (`weight_sync`); the largest share is the binding limit "
              "(columns wait_frac / train_frac / sync_frac).", "",
              "Files: points.csv (every point), points.parquet (with pyarrow), pareto.csv, recheck.csv, "
              "sweep.html / sweep.png, timing.json (wall times).", ""]
    return "\n".join(lines)


def write_outputs(res: SweepResult, out: str) -> list[str]:
    import time

    t0 = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    cols = res.columns
    written = []
    atomic_write(os.path.join(out, "points.csv"), table_text(res.rows, cols))
    written.append("points.csv")
    if write_parquet(os.path.join(out, "points.parquet"), res.rows, cols):
        written.append("points.parquet")
    atomic_write(os.path.join(out, "pareto.csv"), table_text(res.front(), cols))
    written.append("pareto.csv")
    if res.recheck:
        rc = list(dict.fromkeys(k for c in res.recheck for k in c))
        atomic_write(os.path.join(out, "recheck.csv"), table_text(res.recheck, rc))
        written.append("recheck.csv")
    written += write_plots(res, out)
    atomic_write(os.path.join(out, "report.md"), report_md(res))
    written.append("report.md")
    # output_s: every file above (the tables, plots and report), timing.json itself excepted
    timings = {**res.timings, "output_s": time.perf_counter() - t0}
    atomic_write(os.path.join(out, "timing.json"), json.dumps({k: _fmt(v) for k, v in timings.items()},
                                                              indent=1, sort_keys=True) + "\n")
    written.append("timing.json")
    return written
