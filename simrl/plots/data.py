"""What the plots show, as plain tables: built from a simulated run or from a real run.

`PlotData` is the one shape every chart reads. `from_sim` builds it from a run's report dict
and telemetry rows (already rounded as they are written, so a run and `srl-plot` see the same
numbers); `from_realrun` builds it from a `RealRun`, leaving out what a real run does not carry.
Long time series are downsampled deterministically (`downsample`) so rendering stays fast.
No altair here.
"""

from __future__ import annotations

import math

import attrs

MAX_POINTS = 250  # time buckets per series (~3.5 px each at the default width)


@attrs.frozen
class StepView:
    step: int
    start: float  # trainer starts waiting for the batch
    batch_ready: float
    train_end: float
    end: float  # new version usable (publish_end)
    generated_tokens: int
    trained_tokens: int

    @property
    def wait_s(self) -> float:
        return self.batch_ready - self.start

    @property
    def train_s(self) -> float:
        return self.train_end - self.batch_ready

    @property
    def sync_s(self) -> float:
        return self.end - self.train_end


@attrs.frozen
class PlotData:
    title: str
    steps: tuple[StepView, ...]
    train_bands: tuple[tuple[float, float], ...]  # (train_start, train_end) per step
    instances: int
    staleness: tuple[int, ...] | None = None  # per trained group
    load: tuple[tuple, ...] | None = None  # (t, inst, running, waiting, kv_used|None, router_queue|None)
    kv_capacity: int | None = None
    paused: tuple[tuple[int, float, float, str], ...] = ()  # (instance, start, end, why)
    latencies: tuple[float, ...] | None = None  # per finished request, seconds
    completion_lengths: tuple[int, ...] | None = None  # per finished request, tokens
    source: str = "simulated"  # shown in titles
    hold_to_end: bool = True  # the last load sample holds until the run ends (sim); False: sampled data
    queue: tuple[tuple[float, int], ...] | None = None  # router queue (t, requests); None: from `load`
    markers: tuple[tuple[int, float, str], ...] = ()  # (instance, t, "abort" | "preemption")
    t_end: float | None = None  # when the run ended (sim: its makespan)
    depth: tuple[tuple, ...] | None = None  # (t, in flight, buffered, training, {version: buffered}) (sim only)


def downsample(points: list[tuple[float, float]], t_end: float, n: int = MAX_POINTS) -> list[tuple[float, float]]:
    """A step series reduced to at most ~4n points: per time bucket, its first, lowest, highest
    and last points, in time order (M4 downsampling).

    Deterministic (the buckets are fixed by [0, t_end]); peaks, dips and the value carried into
    the next bucket all survive. Consecutive equal values, and all but the last value at one
    instant, are dropped first.
    """
    dedup: list[tuple[float, float]] = []
    for t, v in points:
        if dedup and dedup[-1][0] == t:
            dedup[-1] = (t, v)  # same instant: the last value holds
            if len(dedup) > 1 and dedup[-2][1] == v:
                dedup.pop()
        elif not dedup or dedup[-1][1] != v:
            dedup.append((t, v))
    if dedup and points[-1][0] > dedup[-1][0]:
        dedup.append(points[-1])  # a flat tail still needs its end point to be drawn
    if len(dedup) <= 4 * n or t_end <= 0:
        return dedup
    out: list[tuple[float, float]] = []
    bucket: list[tuple[float, float]] = []
    key = None
    for p in dedup + [(math.inf, math.nan)]:
        b = min(int(p[0] / t_end * n), n - 1) if p[0] != math.inf else None
        if b != key and bucket:
            keep = {bucket[0], min(bucket, key=lambda q: q[1]), max(bucket, key=lambda q: q[1]), bucket[-1]}
            out.extend(sorted(keep))
            bucket = []
        key = b
        bucket.append(p)
    return out


def busy_intervals(load, instances: int, t_end: float, hold_to_end: bool = True) -> list[tuple[int, float, float]]:
    """Per instance, the intervals during which it had at least one running request.

    The last sample's state lasts until ``t_end`` when ``hold_to_end``, else it is a point.
    """
    out = []
    min_gap = t_end / 1000.0  # merge gaps shorter than a pixel or so
    for i in range(instances):
        rows = [r for r in load if r[1] == i]
        spans: list[list[float]] = []
        for k, r in enumerate(rows):
            if r[2] > 0:
                nxt = rows[k + 1][0] if k + 1 < len(rows) else (t_end if hold_to_end else r[0])
                if spans and r[0] - spans[-1][1] <= min_gap:
                    spans[-1][1] = max(spans[-1][1], nxt)
                else:
                    spans.append([r[0], nxt])
        out.extend((i, a, b) for a, b in spans if b > a)
    return out


def pause_windows(mode: str, steps, events, instances: int) -> tuple[tuple[int, float, float, str], ...]:
    """When rollout instances could not generate, by the run's sync mode.

    ``global``: every instance from the pause request (train_end) to publish_end; ``drain``:
    the same window, labelled as draining then syncing; ``colocated``: from batch_ready to
    publish_end; ``per_instance``: each instance's own pull (pull_start..pull_end);
    ``continue``/``unknown``: none.
    """
    out: list[tuple[int, float, float, str]] = []
    if mode in ("global", "drain", "colocated"):
        why = {"global": "paused for weight sync", "drain": "draining, then weight sync",
               "colocated": "offloaded (colocated training)"}[mode]
        for s in steps:
            a = s["batch_ready"] if mode == "colocated" else s["train_end"]
            out.extend((i, a, s["publish_end"], why) for i in range(instances))
    elif mode == "per_instance":
        open_at: dict[int, float] = {}
        for e in events:
            if e["kind"] == "pull_start":
                open_at[e["inst"]] = e["t"]
            elif e["kind"] == "pull_end" and e["inst"] in open_at:
                out.append((e["inst"], open_at.pop(e["inst"]), e["t"], "loading weights"))
    return tuple(out)


def router_queue_series(samples: list[dict], events: list[dict], at_end: int | None,
                        t_end: float) -> tuple[tuple[float, int], ...]:
    """The router queue over time: load samples, plus the arrivals between them, plus the end.

    A load sample is taken when an instance changes, and records the router queue then. The
    queue also grows while no instance changes (every instance paused for a weight sync, or
    full): each ``call_arrive`` event adds one request to the last known length, and the next
    sample resets it to the recorded value. ``at_end`` (report.json's ``router_queue_at_end``)
    is the length when the run ended at ``t_end``. Rows are in telemetry order (events before
    samples at one instant, as the engine logs an arrival before routing it).
    """
    rows = [(e["t"], 0, None) for e in events if e["kind"] == "call_arrive"]
    rows += [(r["t"], 1, r["router_queue"]) for r in samples if r.get("router_queue") is not None]
    rows.sort(key=lambda r: (r[0], r[1]))
    out: list[tuple[float, int]] = []
    q = 0
    for t, _, v in rows:
        q = q + 1 if v is None else v
        out.append((t, q))
    if at_end is not None and (not out or t_end >= out[-1][0]):
        out.append((t_end, int(at_end)))
    return tuple(out)


def event_markers(events: list[dict]) -> tuple[tuple[int, float, str], ...]:
    """Aborts and preemptions as (instance, t, what), from the telemetry events."""
    names = {"abort": "abort", "preempt": "preemption"}
    return tuple((int(e["inst"]), e["t"], names[e["kind"]]) for e in events
                 if e["kind"] in names and e.get("inst") is not None and e["inst"] >= 0)


def from_sim(report: dict, events: list[dict], samples: list[dict], sync_mode: str = "unknown") -> PlotData:
    """Plot data of a simulated run: ``report`` as in report.json, telemetry rows as written."""
    steps = report["steps"]
    windows = [(s["wait_start"], s["publish_end"]) for s in steps]
    calls = [c for c in report["calls"] if c["finish"] is not None]
    gen = [0] * len(steps)
    for c in calls:
        for i, (a, b) in enumerate(windows):
            if (a <= c["finish"] if i == 0 else a < c["finish"]) and c["finish"] <= b:
                gen[i] += c["generated_tokens"]
                break
    views = tuple(StepView(s["step"], s["wait_start"], s["batch_ready"], s["train_end"], s["publish_end"],
                           gen[i], s["trained_completion_tokens"]) for i, s in enumerate(steps))
    n_inst = len(report["instances"])
    caps = {i["kv_capacity_tokens"] for i in report["instances"]}
    load = tuple((r["t"], r["inst"], r["running"], r["waiting"], r["kv_used"], r["router_queue"]) for r in samples)
    totals = report.get("totals", {})
    t_end = max([totals.get("makespan_s") or 0.0] + [s["publish_end"] for s in steps]
                + [r["t"] for r in samples[-1:]] + [e["t"] for e in events[-1:]])
    return PlotData(
        title=report["run_name"], steps=views,
        train_bands=tuple((s["train_start"], s["train_end"]) for s in steps), instances=n_inst,
        staleness=tuple(x for s in steps for x in s["staleness"]),
        load=load or None, kv_capacity=caps.pop() if len(caps) == 1 else None,
        paused=pause_windows(sync_mode, steps, events, n_inst),
        latencies=tuple(c["finish"] - c["arrival"] for c in calls),
        completion_lengths=tuple(c["generated_tokens"] for c in calls),
        queue=router_queue_series(samples, events, totals.get("router_queue_at_end"), t_end) if samples else None,
        markers=event_markers(events), t_end=t_end or None,
        depth=tuple(tuple(r) for r in report.get("queue_depth", ())) or None,
    )


def from_realrun(run, title: str) -> tuple[PlotData, dict[str, str]]:
    """Plot data of a `RealRun`, and why each view that cannot be drawn is skipped."""
    views = tuple(StepView(s.step, s.start, s.start + s.wait_s, s.start + s.wait_s + s.train_s, s.end,
                           s.generated_tokens, s.trained_tokens) for s in run.steps)
    load = tuple((x.t, x.instance, x.running, x.waiting, x.kv_used, x.router_queue)
                 for s in run.steps for x in s.load)
    n_inst = run.instances or (max(x[1] for x in load) + 1 if load else 0)
    lists = [s.staleness for s in run.steps]
    staleness = tuple(x for lst in lists for x in lst) if all(lst is not None for lst in lists) else None
    skipped = {}
    if not load:
        skipped["instance_load"] = "the real run carries no per-instance load samples"
    if staleness is None:
        skipped["staleness"] = "the real run gives staleness only as per-step mean/max, not per trained group"
    skipped["distributions"] = "the real-run format carries no per-request latencies or completion lengths"
    skipped["queue_depth"] = "the real-run format carries no queue or buffer depth"
    data = PlotData(
        title=title, steps=views, train_bands=tuple((v.batch_ready, v.train_end) for v in views),
        instances=n_inst, staleness=staleness, load=load or None, kv_capacity=run.kv_capacity_tokens,
        source=f"real run, {run.system}", hold_to_end=False,
    )
    return data, skipped
