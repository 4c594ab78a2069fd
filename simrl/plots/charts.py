"""The six run views as altair charts, built from `PlotData`.

Each builder takes a `Datasets` collector and the data, and returns a chart (its rows live in
the collector), or None when the data cannot support the view (the caller says why). Every chart has a title naming the run, axis titles with units and a legend where colour
carries meaning. altair is imported inside the functions so that `import simrl` stays light.
"""

from __future__ import annotations

import numpy as np

from simrl.plots.data import PlotData, busy_intervals, downsample

WIDTH = 860
STATE_COLORS = {"waiting for a batch": "#bdbdbd", "training": "#1f77b4", "weight sync": "#ff7f0e",
                "generating": "#2ca02c", "paused for weight sync": "#d62728", "draining, then weight sync": "#d62728",
                "offloaded (colocated training)": "#9467bd", "loading weights": "#d62728"}
PHASES = ("waiting for a batch", "training", "weight sync")


def _alt():
    import altair as alt

    return alt


class Datasets:
    """Named inline datasets, attached to the spec after `to_dict` (altair walks inline values slowly)."""

    def __init__(self) -> None:
        self.values: dict[str, list[dict]] = {}

    def __call__(self, rows: list[dict]):
        name = f"d{len(self.values)}"
        self.values[name] = rows
        return _alt().NamedData(name=name)


def _t_end(d: PlotData) -> float:
    ends = [s.end for s in d.steps] + ([d.load[-1][0]] if d.load else [])
    return max(ends, default=1.0) or 1.0


def _title(text: str, d: PlotData, sub: str = ""):
    subtitle = [f"run {d.title} · {d.source}"] + ([sub] if sub else [])
    return _alt().TitleParams(text=text, subtitle=subtitle)


def _band_and_versions(ds, d: PlotData, x_scale, height: int):
    """Shaded training phases and dashed version boundaries (publish_end), for a time panel."""
    alt = _alt()
    bands = [{"a": a, "b": b, "what": "training (train_start..train_end)"} for a, b in d.train_bands]
    rules = [{"t": s.end, "label": f"v{s.step}"} for s in d.steps]
    band = alt.Chart(ds(bands)).mark_rect(opacity=0.18).encode(
        x=alt.X("a:Q", scale=x_scale), x2="b:Q",
        fill=alt.Fill("what:N", title="phase", scale=alt.Scale(range=["#7f7f7f"])))
    rule = alt.Chart(ds(rules)).mark_rule(strokeDash=[4, 3], color="#555555").encode(x=alt.X("t:Q", scale=x_scale))
    label = alt.Chart(ds(rules)).mark_text(align="left", dx=3, dy=-height / 2 + 8, fontSize=10,
                                                 color="#333333").encode(x=alt.X("t:Q", scale=x_scale), text="label:N")
    return band, rule, label


def _tail(d: PlotData, pts: list, t_end: float) -> list:
    """The point that holds a simulated series' last value until the run ends (none for sampled data)."""
    return [(t_end, pts[-1][1])] if d.hold_to_end and pts else []


def instance_load(ds: Datasets, d: PlotData):
    """Router queue, training band, per-instance requests and KV occupancy over time."""
    if not d.load:
        return None
    alt = _alt()
    t_end = _t_end(d)
    xs = alt.Scale(domain=[0, t_end], nice=False)
    xax = alt.X("t:Q", title="time (s)", scale=xs)
    panels = []
    queue = [(r[0], r[5]) for r in d.load if r[5] is not None]
    if queue:
        rows = [{"t": t, "v": v} for t, v in downsample(queue + _tail(d, queue, t_end), t_end)]
        empty = max(r["v"] for r in rows) == 0  # an always-empty queue still gets a readable axis
        line = alt.Chart(ds(rows)).mark_line(interpolate="step-after", color="#444444").encode(
            x=xax, y=alt.Y("v:Q", title="router queue (requests)",
                           scale=alt.Scale(domain=[0, 1]) if empty else alt.Scale(domainMin=0)))
        panels.append(("router queue", line, 130))
    req, kv = [], []
    for i in range(d.instances):
        rows = [r for r in d.load if r[1] == i]
        if not rows:
            continue
        pts = [(r[0], r[2] + r[3]) for r in rows]
        req += [{"t": t, "v": v, "instance": f"instance {i}"} for t, v in downsample(pts + _tail(d, pts, t_end), t_end)]
        if rows[0][4] is not None:
            scale = 100.0 / d.kv_capacity if d.kv_capacity else 1.0
            pts = [(r[0], round(r[4] * scale, 4)) for r in rows]
            kv += [{"t": t, "v": v, "instance": f"instance {i}"} for t, v in downsample(pts + _tail(d, pts, t_end), t_end)]
    color = alt.Color("instance:N", title="rollout instance")
    panels.append(("requests", alt.Chart(ds(req)).mark_line(interpolate="step-after").encode(
        x=xax, y=alt.Y("v:Q", title="requests (running + waiting)"), color=color), 170))
    if kv:
        ytitle = "KV in use (% of capacity)" if d.kv_capacity else "KV in use (tokens)"
        panels.append(("kv", alt.Chart(ds(kv)).mark_line(interpolate="step-after").encode(
            x=xax, y=alt.Y("v:Q", title=ytitle), color=color), 170))
    layers = []
    for _, chart, h in panels:
        band, rule, label = _band_and_versions(ds, d, xs, h)
        layers.append(alt.layer(band, rule, chart, label).properties(width=WIDTH, height=h))
    return alt.vconcat(*layers, title=_title(
        "Instance load over time", d, "grey bands: training; dashed lines: version vN published (publish_end)"))


def timeline(ds: Datasets, d: PlotData):
    """Gantt of the trainer (waiting / training), weight sync per version, and rollout instances."""
    alt = _alt()
    t_end = _t_end(d)
    rows = []
    for s in d.steps:
        rows.append({"lane": "trainer", "a": s.start, "b": s.batch_ready, "state": "waiting for a batch"})
        rows.append({"lane": "trainer", "a": s.batch_ready, "b": s.train_end, "state": "training"})
        rows.append({"lane": "weight sync", "a": s.train_end, "b": s.end, "state": "weight sync"})
    lanes = ["trainer", "weight sync"]
    if d.load:
        for i, a, b in busy_intervals(d.load, d.instances, t_end, d.hold_to_end):
            rows.append({"lane": f"instance {i}", "a": a, "b": b, "state": "generating"})
    for i, a, b, why in d.paused:
        rows.append({"lane": f"instance {i}", "a": a, "b": b, "state": why})
    lanes += [f"instance {i}" for i in range(d.instances) if any(r["lane"] == f"instance {i}" for r in rows)]
    states = [s for s in STATE_COLORS if any(r["state"] == s for r in rows)]
    xs = alt.Scale(domain=[0, t_end], nice=False)
    y = alt.Y("lane:N", title=None, sort=lanes)
    bars = alt.Chart(ds(rows)).mark_bar(height={"band": 0.7}).encode(
        x=alt.X("a:Q", title="time (s)", scale=xs), x2="b:Q", y=y,
        color=alt.Color("state:N", title="state", sort=states,
                        scale=alt.Scale(domain=states, range=[STATE_COLORS[s] for s in states])))
    versions = [{"t": s.end, "label": f"v{s.step}", "lane": "weight sync"} for s in d.steps]
    rule = alt.Chart(ds(versions)).mark_rule(strokeDash=[4, 3], color="#555555").encode(x=alt.X("t:Q", scale=xs))
    text = alt.Chart(ds(versions)).mark_text(align="left", dx=3, dy=-12, fontSize=10).encode(
        x=alt.X("t:Q", scale=xs), y=y, text="label:N")
    return alt.layer(bars, rule, text).properties(width=WIDTH, height=34 * len(lanes) + 20, title=_title(
        "Timeline: rollout, training and weight sync", d,
        "vN: version N published; paused = instance could not generate while weights changed"))


def staleness(ds: Datasets, d: PlotData):
    if d.staleness is None:
        return None
    alt = _alt()
    counts: dict[int, int] = {}
    for s in d.staleness:
        counts[s] = counts.get(s, 0) + 1
    rows = [{"staleness": k, "groups": counts.get(k, 0)} for k in range(0, max(counts, default=0) + 1)]
    mean = sum(d.staleness) / len(d.staleness) if d.staleness else 0.0
    x = alt.X("staleness:O", title="staleness (versions behind the trained policy)", axis=alt.Axis(labelAngle=0))
    base = alt.Chart(ds(rows)).encode(x=x, y=alt.Y("groups:Q", title="trained groups"))
    return alt.layer(base.mark_bar(color="#1f77b4", size=40), base.mark_text(dy=-7).encode(text="groups:Q")).properties(
        width=420, height=260, title=_title("Staleness of trained groups", d,
                                            f"{len(d.staleness)} groups, mean {mean:.2f}"))


def throughput(ds: Datasets, d: PlotData):
    alt = _alt()
    rows = []
    for s in d.steps:
        dt = max(s.end - s.start, 1e-12)
        rows.append({"step": s.step, "series": "generated", "v": round(s.generated_tokens / dt, 3)})
        rows.append({"step": s.step, "series": "trained", "v": round(s.trained_tokens / dt, 3)})
    return alt.Chart(ds(rows)).mark_bar().encode(
        x=alt.X("step:O", title="training step", axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("series:N", sort=["generated", "trained"]),
        y=alt.Y("v:Q", title="tokens/s (over the step's duration)"),
        color=alt.Color("series:N", title="tokens", sort=["generated", "trained"],
                        scale=alt.Scale(range=["#2ca02c", "#1f77b4"])),
    ).properties(width=max(300, 60 * len(d.steps)), height=260, title=_title(
        "Throughput per training step", d, "generated: completion tokens finished in the step; trained: its batch"))


def step_breakdown(ds: Datasets, d: PlotData):
    alt = _alt()
    rows = []
    for s in d.steps:
        for k, (phase, v) in enumerate(zip(PHASES, (s.wait_s, s.train_s, s.sync_s), strict=True)):
            rows.append({"step": s.step, "phase": phase, "order": k, "s": round(v, 6)})
    return alt.Chart(ds(rows)).mark_bar().encode(
        x=alt.X("step:O", title="training step", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("s:Q", title="seconds", stack="zero"),
        color=alt.Color("phase:N", title="phase", sort=list(PHASES),
                        scale=alt.Scale(domain=list(PHASES), range=[STATE_COLORS[p] for p in PHASES])),
        order=alt.Order("order:Q"),
    ).properties(width=max(300, 50 * len(d.steps)), height=260, title=_title(
        "Step time breakdown", d, "waiting for a batch = rollout-bound; step ends when the version is published"))


def distributions(ds: Datasets, d: PlotData):
    if not d.latencies:
        return None
    alt = _alt()
    lat = np.sort(np.asarray(d.latencies, dtype=float))
    n = len(lat)
    idx = np.unique(np.round(np.linspace(0, n - 1, min(n, 500))).astype(int))
    cdf = [{"s": round(float(lat[i]), 6), "p": round((i + 1) / n, 6)} for i in idx]
    pct = [{"s": round(float(np.quantile(lat, q)), 6), "label": f"p{int(q * 100)}"} for q in (0.5, 0.99)]
    xs = alt.X("s:Q", title="request latency, arrival to last token (s)")
    c = alt.layer(
        alt.Chart(ds(cdf)).mark_line(interpolate="step-after", color="#1f77b4").encode(
            x=xs, y=alt.Y("p:Q", title="fraction of requests ≤ latency")),
        alt.Chart(ds(pct)).mark_rule(strokeDash=[4, 3], color="#d62728").encode(x="s:Q"),
        alt.Chart(ds(pct)).mark_text(align="left", dx=3, y=8, color="#d62728").encode(x="s:Q", text="label:N"),
    ).properties(width=400, height=260, title=f"Request latency CDF ({n} requests)")
    lens = np.asarray(d.completion_lengths or (), dtype=float)
    counts, edges = np.histogram(lens, bins=40) if len(lens) else (np.zeros(0), np.zeros(1))
    hist = [{"a": round(float(edges[k]), 3), "b": round(float(edges[k + 1]), 3), "n": int(counts[k])}
            for k in range(len(counts))]
    h = alt.Chart(ds(hist)).mark_bar(color="#2ca02c").encode(
        x=alt.X("a:Q", title="completion length (tokens)", bin="binned"), x2="b:Q",
        y=alt.Y("n:Q", title="requests"),
    ).properties(width=400, height=260, title=f"Completion lengths (median {np.median(lens) if len(lens) else 0:.0f})")
    return alt.hconcat(c, h, title=_title("Request latency and completion lengths", d))


VIEWS = {
    "instance_load": instance_load,
    "timeline": timeline,
    "staleness": staleness,
    "throughput": throughput,
    "step_breakdown": step_breakdown,
    "distributions": distributions,
}
