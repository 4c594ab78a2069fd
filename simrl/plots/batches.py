"""Batch assembly: what the trainer waits for, and what waits for the trainer.

For every moment of a simulated run, the groups are split by the batch that will train them
(read back from report.json's per-step ``gids`` and the telemetry's ``group_dispatch``,
``group_done`` and ``buffer_drop`` events), relative to the *next* batch the trainer takes:

* ``next batch: still generating`` -- groups of the next batch that are dispatched and not done
  (for PSRL: the reservations of the buffer the trainer consumes next);
* ``next batch: finished`` -- groups of the next batch already done;
* ``finished, for a later batch`` -- done and accepted, but trained by a later step or not by the
  end of the run (PSRL: groups that sit in a later per-version buffer; verl fully_async: the
  overage of the MessageQueue beyond the next window).

The sum of the last two is the run's buffer (``queue_depth``'s buffered groups). Per step,
`step_rows` gives the wait, the slowest group of the batch, the groups queued for later batches
when it became ready, and the *straggler wait*: how long the trainer kept waiting although a
full batch's worth of finished groups was already queued. A first-come batch (FIFO) has no
straggler wait; a batch bound to particular groups (PSRL's buffers) can.

`batch_series` / `step_rows` are plain Python (no altair); `assembly_chart` draws one panel per
run (the three series and, dashed, their finished sum: the run's buffer, verl's MessageQueue
depth) and `write_assembly` writes it as HTML and PNG with `simrl.plots.render`'s canonical spec
(deterministic).
"""

from __future__ import annotations

from pathlib import Path

from simrl.plots.data import downsample

SERIES = ("next batch: still generating", "next batch: finished", "finished, for a later batch",
          "queue depth: all finished, untrained")
COLORS = ("#d62728", "#2ca02c", "#1f77b4", "#000000")
DASHES = ([1, 0], [1, 0], [1, 0], [5, 3])


def _groups(report: dict, events: list[dict]) -> dict[int, dict]:
    """gid -> {dispatch, done, dropped, step}: the first dispatch, the accepted completion, the
    time it left the buffer other than by training, the step that trained it (None: not trained)."""
    g: dict[int, dict] = {}
    for e in events:
        kind = e.get("kind")
        if kind == "group_dispatch":
            g.setdefault(e["gid"], {"dispatch": e["t"], "done": None, "dropped": None, "step": None})
        elif kind == "group_done" and e.get("verdict") == "accept" and e["gid"] in g:
            g[e["gid"]]["done"] = e["t"]
        elif kind == "buffer_drop" and e["gid"] in g:
            g[e["gid"]]["dropped"] = e["t"]
    for s in report["steps"]:
        for gid in s.get("gids", ()):
            if gid not in g:
                raise ValueError(f"step {s['step']} trained group {gid}, which has no group_dispatch event "
                                 "(was the run written with run.telemetry=false?)")
            g[gid]["step"] = s["step"]
    return g


def _next_step(steps: list[dict], t: float) -> int | None:
    """The step whose batch is not yet taken at time t (None: every step's batch is taken)."""
    for s in steps:
        if s["batch_ready"] > t:
            return s["step"]
    return None


def counts_at(groups: dict[int, dict], steps: list[dict], t: float, k: int | None = None) -> tuple[int, int, int]:
    """(next batch generating, next batch finished, finished for a later batch) at time t.

    ``k`` is the next step (default: the first step whose batch is taken after t).
    """
    if k is None:
        k = _next_step(steps, t)
    gen = fin = later = 0
    for g in groups.values():
        if g["dispatch"] > t:
            continue
        in_next = k is not None and g["step"] == k
        done = g["done"] is not None and g["done"] <= t
        if in_next and not done:
            gen += 1
        elif in_next:
            fin += 1
        elif done and (g["step"] is None or (k is not None and g["step"] > k)) and not (
                g["dropped"] is not None and g["dropped"] <= t):
            later += 1  # trained by a later step, or by none in this run (still buffered at the end)
    return gen, fin, later


def batch_series(report: dict, events: list[dict]) -> list[tuple[float, int, int, int]]:
    """(t, next generating, next finished, later finished) at every instant one of them changes."""
    groups = _groups(report, events)
    steps = report["steps"]
    times = sorted({0.0} | {v for g in groups.values() for v in (g["dispatch"], g["done"], g["dropped"]) if v is not None}
                   | {s["batch_ready"] for s in steps})
    out: list[tuple[float, int, int, int]] = []
    for t in times:
        row = counts_at(groups, steps, t)
        if not out or out[-1][1:] != row:
            out.append((t, *row))
    return out


def step_rows(report: dict, events: list[dict], batch_groups: int) -> list[dict]:
    """Per training step: the wait, its slowest group, what was queued for later batches.

    ``straggler_wait_s``: the part of the wait during which at least ``batch_groups`` finished
    groups were already queued (a full batch was there, the trainer waited for particular ones).
    """
    groups = _groups(report, events)
    steps = report["steps"]
    series = batch_series(report, events)
    rows = []
    for s in steps:
        k, a, b = s["step"], s["wait_start"], s["batch_ready"]
        mine = [g for g in groups.values() if g["step"] == k]
        slow = max(mine, key=lambda g: (g["done"] or 0.0, g["dispatch"])) if mine else None
        # the time in [wait_start, batch_ready) during which a full batch's worth of finished
        # groups was queued (the next step is k throughout: the previous batch was taken by a)
        _, fin, later = counts_at(groups, steps, b, k)
        straggler = 0.0
        for j, (t, _gen, f, lat) in enumerate(series):
            t_next = series[j + 1][0] if j + 1 < len(series) else b
            lo, hi = max(t, a), min(t_next, b)
            if hi > lo and f + lat >= batch_groups:
                straggler += hi - lo
        rows.append({
            "step": k, "wait_s": b - a, "binding_limit": s.get("binding_limit", ""),
            "groups": len(mine), "later_queued_at_ready": later, "queued_at_ready": fin + later,
            "slowest_dispatch": slow["dispatch"] if slow else None, "slowest_done": slow["done"] if slow else None,
            "slowest_latency_s": (slow["done"] - slow["dispatch"]) if slow and slow["done"] is not None else None,
            "straggler_wait_s": straggler, "staleness_max": max(s["staleness"], default=0),
        })
    return rows


def assembly_rows(report: dict, events: list[dict], run: str) -> tuple[list[dict], list[dict]]:
    """(line rows, trainer-wait rows) of one run, for `assembly_chart`; times rounded to 1 ms."""
    series = batch_series(report, events)
    t_end = max([report["totals"].get("makespan_s") or 0.0] + [r[0] for r in series]) or 1.0
    series = [(*r, r[2] + r[3]) for r in series]  # + the whole buffer: next batch's finished + later
    rows = []
    for j, name in enumerate(SERIES):
        pts = [(r[0], r[1 + j]) for r in series] + [(t_end, series[-1][1 + j])]
        rows += [{"run": run, "t": round(t, 3), "v": v, "series": name} for t, v in downsample(pts, t_end)]
    waits = [{"run": run, "a": round(s["wait_start"], 3), "b": round(s["batch_ready"], 3),
              "what": "trainer waiting for its batch"} for s in report["steps"] if s["batch_ready"] > s["wait_start"]]
    return rows, waits


def assembly_chart(panels: list[tuple[str, list[dict], list[dict]]], title: str, subtitle: str = ""):
    """One panel per run (label, line rows, wait rows), stacked; shared legend. Returns (chart, datasets)."""
    import altair as alt

    values: dict[str, list[dict]] = {}
    charts = []
    for j, (label, rows, waits) in enumerate(panels):
        values[f"l{j}"], values[f"w{j}"] = rows, waits
        t_end = max((r["t"] for r in rows), default=1.0) or 1.0
        xs = alt.Scale(domain=[0, t_end], nice=False)
        band = alt.Chart(alt.NamedData(name=f"w{j}")).mark_rect(opacity=0.15).encode(
            x=alt.X("a:Q", scale=xs), x2="b:Q",
            fill=alt.Fill("what:N", title="trainer", scale=alt.Scale(range=["#7f7f7f"])))
        lines = alt.Chart(alt.NamedData(name=f"l{j}")).mark_line(interpolate="step-after").encode(
            x=alt.X("t:Q", title="time (s)", scale=xs),
            y=alt.Y("v:Q", title="prompt groups", axis=alt.Axis(tickMinStep=1, format="d")),
            color=alt.Color("series:N", title="groups", sort=list(SERIES),
                            scale=alt.Scale(domain=list(SERIES), range=list(COLORS))),
            strokeDash=alt.StrokeDash("series:N", sort=list(SERIES), legend=None,
                                      scale=alt.Scale(domain=list(SERIES), range=list(DASHES))))
        charts.append(alt.layer(band, lines).resolve_scale(color="independent").properties(
            width=860, height=170, title=label))
    chart = alt.vconcat(*charts).properties(title=alt.TitleParams(
        text=title, subtitle=[subtitle] if subtitle else []))
    return chart, values


def write_assembly(out_dir, name: str, panels, title: str, subtitle: str = "", png: bool = True,
                   scale: float = 1.0) -> list[Path]:
    """Write ``<out_dir>/<name>.png`` (when ``png``, at ``scale`` pixels per CSS pixel) and
    ``<name>.html``; return the paths. Same data, same vl-convert and fonts: same bytes."""
    import vl_convert as vlc

    from simrl.atomic import atomic_write
    from simrl.plots.render import spec_json

    chart, values = assembly_chart(panels, title, subtitle)
    spec = spec_json(chart, values)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    if png:
        paths.append(out / f"{name}.png")
        atomic_write(paths[-1], vlc.vegalite_to_png(spec, scale=scale))
    paths.append(out / f"{name}.html")
    atomic_write(paths[-1], vlc.vegalite_to_html(spec, bundle=False))
    return paths
