"""The queue and buffer depth view: groups in flight, finished-but-untrained groups (the buffer,
per oldest weight version when more than one is present) and groups being trained, over time.

Drawn from report.json's ``queue_depth`` (`simrl.engine.limits.LimitClock`); the training
bands and version boundaries are the same as on the other time panels.
"""

from __future__ import annotations

from simrl.plots.data import PlotData, downsample

SERIES = ("groups in flight", "groups buffered (finished, not trained)", "groups being trained")
COLORS = ("#2ca02c", "#1f77b4", "#7f7f7f")


def depth_rows(depth, t_end: float) -> tuple[list[dict], list[dict]]:
    """(totals rows, per-version buffer rows), each a step series downsampled per series."""
    rows = []
    for k, name in enumerate(SERIES):
        pts = [(r[0], r[1 + k]) for r in depth]
        pts.append((t_end, pts[-1][1]))
        rows += [{"t": t, "v": v, "series": name} for t, v in downsample(pts, t_end)]
    versions = sorted({int(v) for r in depth for v in r[4]})
    per_version = []
    if len(versions) > 1:
        for ver in versions:
            pts = [(r[0], r[4].get(str(ver), 0)) for r in depth]
            pts.append((t_end, pts[-1][1]))
            per_version += [{"t": t, "v": v, "version": f"v{ver}"} for t, v in downsample(pts, t_end)]
    return rows, per_version


def queue_depth(ds, d: PlotData):
    """Groups in flight, buffered and being trained over time (None without depth data)."""
    if not d.depth:
        return None
    from simrl.plots.charts import _alt, _band_and_versions, _t_end, _title

    alt = _alt()
    t_end = max(_t_end(d), d.depth[-1][0])
    xs = alt.Scale(domain=[0, t_end], nice=False)
    rows, per_version = depth_rows(d.depth, t_end)
    height = 220
    band, rule, label = _band_and_versions(ds, d, xs, height)
    lines = alt.Chart(ds(rows)).mark_line(interpolate="step-after").encode(
        x=alt.X("t:Q", title="time (s)", scale=xs), y=alt.Y("v:Q", title="prompt groups"),
        color=alt.Color("series:N", title="queue", sort=list(SERIES),
                        scale=alt.Scale(domain=list(SERIES), range=list(COLORS))))
    top = alt.layer(band, lines, rule, label).resolve_scale(color="independent").properties(
        width=860, height=height)
    if not per_version:
        return top.properties(title=_title("Queue and buffer depth", d,
                                           "finished-but-untrained groups wait in the buffer for the trainer"))
    stack = alt.Chart(ds(per_version)).mark_line(interpolate="step-after").encode(
        x=alt.X("t:Q", title="time (s)", scale=xs), y=alt.Y("v:Q", title="buffered groups"),
        color=alt.Color("version:N", title="oldest token version", sort=sorted(
            {r["version"] for r in per_version}, key=lambda v: int(v[1:])))).properties(width=860, height=160)
    return alt.vconcat(top, stack).resolve_scale(color="independent").properties(title=_title(
        "Queue and buffer depth", d, "bottom: the buffer split by the oldest weight version of each group"))
