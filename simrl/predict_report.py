"""The move-engines report of `srl-predict --report`: ``report.md``, ``move_engines.png`` /
``.html`` (altair, rendered by `simrl.plots.render`) and ``move_engines.json``.

The plot shows, per k engines moved to training, when the trainer can start its next step
(p10-p90 band, p50 line) and the stall threshold (as-is p50 plus the tolerance); the report
gives the table and the answer, all read from the `simrl.predict.MoveStudy`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from simrl.atomic import atomic_write

QUESTION = ("Rollout load spikes and training falls idle: how many engines can move to training "
            "without stalling the next batch?")


def _s(x: float) -> str:
    return "never" if math.isinf(x) or math.isnan(x) else f"{x:.2f}"


def chart(study, title: str = QUESTION):
    import altair as alt

    rows = []
    for i, k in enumerate(study.ks):
        q = study.quantiles(i)
        if all(math.isfinite(v) for v in q):
            rows.append({"k": k, "p10": q[0], "p50": q[1], "p90": q[2],
                         "verdict": "stalls" if study.stalls(i) else "on time"})
    data = alt.Data(values=rows)
    x = alt.X("k:Q", title="rollout engines moved to training (k)", axis=alt.Axis(tickMinStep=1, format="d"))
    band = alt.Chart(data).mark_area(opacity=0.2, color="#4c78a8").encode(
        x=x, y=alt.Y("p10:Q", title="time to the next batch after the snapshot (s)"), y2="p90:Q")
    line = alt.Chart(data).mark_line(color="#4c78a8").encode(x=x, y="p50:Q")
    points = alt.Chart(data).mark_point(filled=True, size=70).encode(
        x=x, y="p50:Q", color=alt.Color("verdict:N", scale=alt.Scale(domain=["on time", "stalls"],
                                                                     range=["#2ca02c", "#d62728"]),
                                        legend=alt.Legend(title="next batch (p50 vs as-is)", orient="bottom")),
        tooltip=["k:Q", "p10:Q", "p50:Q", "p90:Q", "verdict:N"])
    thr = {"y": study.threshold_s, "label": f"stall threshold {study.threshold_s:.1f} s "
                                             f"(as-is p50 + {study.tolerance_s:g} s)"}
    rule = alt.Chart(alt.Data(values=[thr])).mark_rule(color="#d62728", strokeDash=[6, 3]).encode(y="y:Q")
    text = alt.Chart(alt.Data(values=[{**thr, "x": study.ks[0]}])).mark_text(
        align="left", dx=4, dy=-7, color="#d62728").encode(x="x:Q", y="y:Q", text="label:N")
    import textwrap

    return alt.layer(band, line, points, rule, text).properties(
        width=560, height=320, title=alt.Title(textwrap.wrap(title, 70),
                                               subtitle=textwrap.wrap(study.answer() + " (p10-p90 band, p50 line)", 95)))


def write_report(study, out: Path, *, snapshot_line: str, deployment: str, instances: int, spike=None,
                 png: bool = True, command: str = "") -> list[Path]:
    """Write the report files under ``out``; return their paths."""
    from simrl.plots.render import render

    out.mkdir(parents=True, exist_ok=True)
    files = render(chart(study), out, "move_engines", png=png)
    data = study.to_dict()
    if spike is not None:
        data["truth_next_batch_s"] = spike.truth_batch_s - study.t0
    atomic_write(out / "move_engines.json", json.dumps(data, indent=1, sort_keys=True) + "\n")
    files.append(out / "move_engines.json")
    lines = [f"# {QUESTION}", "", f"**Answer: {study.answer()}.**", "",
             f"Deployment: {deployment}.", "", f"Snapshot: {snapshot_line}."]
    if spike is not None:
        lines += ["", f"The snapshot is the rollout load spike while the trainer is idle: of the instants at "
                      f"which the trainer waits for the batch of step {spike.step}, the one with the most "
                      f"requests in flight ({spike.in_flight}), found by simulating the run "
                      f"({spike.events} events in)."]
    lines += ["", f"Each k is predicted over the same {study.predictions[0].draws} draws of the unknown future (draw d of every k "
                  "shares its seed: the same future prompts and the same lengths for the calls in flight), so "
                  "k is compared with k = 0 draw by draw. The trainer can start its next step when the batch "
                  "is ready and its resharding onto the moved GPUs (the weight-sync model's publish time for "
                  "k engines) is done. k stalls the next batch when that start is later than as-is by more "
                  f"than {study.tolerance_s:g} s in the median draw.", "",
              "| k moved | rollout engines left | next step can start: p10 / p50 / p90 (s) | later than as-is: "
              "p10 / p50 / p90 (s) | resharding (s) | next batch |",
              "|---:|---:|---|---|---:|---|"]
    for i, k in enumerate(study.ks):
        q, d, p = study.quantiles(i), study.delay_quantiles(i), study.predictions[i]
        lines.append(f"| {k} | {instances - k} | "
                     f"{' / '.join(_s(x) for x in q)} | {' / '.join(_s(x) for x in d)} | {p.reshard_s:.2f} | "
                     f"{'stalls' if study.stalls(i) else 'on time'} |")
    lines += ["", f"Stall threshold on the plot: as-is p50 {study.quantiles(0)[1]:.2f} s + {study.tolerance_s:g} s "
                  f"= {study.threshold_s:.2f} s after the snapshot."]
    if spike is not None:
        truth = spike.truth_batch_s - study.t0
        q = study.quantiles(0)
        inside = "inside" if q[0] <= truth <= q[2] else "outside"
        lines += ["", f"Check against the run itself: continued as is, it had the batch of step {spike.step} "
                      f"ready {truth:.2f} s after the snapshot, {inside} the as-is [p10, p90] band "
                      f"[{q[0]:.2f}, {q[2]:.2f}] s."]
    lines += ["", "What the prediction does not model (docs/predict.md): the prefix cache restarts cold; the "
                  "requests of a moved engine are re-queued keeping their tokens and re-prefilled where they "
                  "land; resharding is priced by the weight-sync model, not measured; the speed-up the moved "
                  "GPUs give the next training step is not part of this question (it only asks whether the "
                  "batch stays on time)."]
    if command:
        lines += ["", "Reproduce:", "", "```console", command, "```"]
    lines += ["", "Files: move_engines.png / move_engines.html (the plot), move_engines.json (the numbers)."]
    atomic_write(out / "report.md", "\n".join(lines) + "\n")
    files.append(out / "report.md")
    return files
