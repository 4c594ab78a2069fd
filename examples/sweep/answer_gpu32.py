"""Answer the gpu32 question from an `srl-sweep` output directory; write answer.md and crossover.{html,png}.

    python examples/sweep/answer_gpu32.py outputs/gpu32

(1) 20/12 with TP2 rollout vs 16/16 with TP4: the best point of each split over the other axes
(staleness bound, max_num_seqs, ZeRO stage), and the same comparison at matched settings.
(2) Where the training step stops being the bottleneck: for each rollout TP and staleness bound,
the split at which the binding limit (points.csv ``binding``; docs/search.md) changes from
``training`` (more rollout GPUs than that) to ``rollout`` (fewer).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections import defaultdict


def load(out: str) -> list[dict]:
    with open(os.path.join(out, "points.csv"), encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["status"] == "ok"]
    for r in rows:
        for k in ("rollout_gpus", "training_gpus", "rollout_tp", "staleness", "max_num_seqs", "training_zero"):
            r[k] = int(r[k])
        for k in ("step_time_s", "trained_tokens_per_s", "wait_frac", "train_frac", "sync_frac",
                  "gpu_hours_per_1k_steps", "staleness_mean"):
            r[k] = float(r[k])
    return rows


def best(rows, **match):
    cands = [r for r in rows if all(r[k] == v for k, v in match.items())]
    return min(cands, key=lambda r: (r["step_time_s"], int(r["point"]))) if cands else None


def crossovers(rows):
    """(tp, staleness) -> (largest rollout_gpus bound by rollout, smallest bound by training), best points."""
    by = defaultdict(dict)
    for r in rows:
        key = (r["rollout_tp"], r["staleness"])
        b = by[key].get(r["rollout_gpus"])
        if b is None or (r["step_time_s"], int(r["point"])) < (b["step_time_s"], int(b["point"])):
            by[key][r["rollout_gpus"]] = r
    out = {}
    for key, per in sorted(by.items()):
        gpus = sorted(per)
        train_bound = [g for g in gpus if per[g]["binding"] == "training"]
        out[key] = (min(train_bound) if train_bound else None, per)
    return out


def main(out: str) -> None:
    rows = load(out)
    a = best(rows, rollout_gpus=20, rollout_tp=2)
    b = best(rows, rollout_gpus=16, rollout_tp=4)
    lines = ["# On 32 GPUs: 20/12 with TP2 rollout, or 16/16 with TP4?", ""]
    if a is None or b is None:
        lines.append("One of the two deployments has no feasible point in this sweep.")
    else:
        win, lose = (a, b) if a["step_time_s"] < b["step_time_s"] else (b, a)
        name = {id(a): "20/12 TP2", id(b): "16/16 TP4"}
        gain = 1 - win["step_time_s"] / lose["step_time_s"]
        lines += [f"**{name[id(win)]} is better**: its best step time is {win['step_time_s']:.2f} s vs "
                  f"{lose['step_time_s']:.2f} s ({gain:.0%} shorter; {win['trained_tokens_per_s']:.0f} vs "
                  f"{lose['trained_tokens_per_s']:.0f} trained tokens/s, {win['gpu_hours_per_1k_steps']:.0f} vs "
                  f"{lose['gpu_hours_per_1k_steps']:.0f} GPU-hours per 1k steps).", ""]
        for tag, r in (("20/12 TP2", a), ("16/16 TP4", b)):
            lines.append(f"- {tag} best: point {r['point']}, staleness bound {r['staleness']}, max_num_seqs "
                         f"{r['max_num_seqs']}, {r['rollout_gpus'] // r['rollout_tp']} instances; binding "
                         f"{r['binding']} (trainer waiting {r['wait_frac']:.0%}, training {r['train_frac']:.0%}, "
                         f"weight sync {r['sync_frac']:.0%} of the step).")
        wins = total = 0
        for r in rows:
            if r["rollout_gpus"] == 20 and r["rollout_tp"] == 2:
                m = best(rows, rollout_gpus=16, rollout_tp=4, staleness=r["staleness"], max_num_seqs=r["max_num_seqs"],
                         training_zero=r["training_zero"])
                if m:
                    total += 1
                    wins += m["step_time_s"] < r["step_time_s"]
        lines += ["", f"At matched settings (same staleness bound, max_num_seqs, ZeRO stage) 16/16 TP4 is faster in "
                  f"{wins} of {total} pairs.", ""]
    lines += ["## Where is the training step no longer the bottleneck?", "",
              "Binding limit of the best point per split (docs/search.md: the largest of trainer-waiting, "
              "training and weight-sync time over steps 2..K). With more rollout GPUs than the crossover the "
              "training step binds; at or below the last rollout-bound split, rollout (generation under the "
              "staleness bound) binds and training is no longer the bottleneck.", "",
              "| rollout TP | staleness bound | training binds from (rollout/training GPUs) | rollout binds up to |",
              "|---|---|---|---|"]
    cross = crossovers(rows)
    for (tp, st), (first_train, per) in cross.items():
        rollout_bound = [g for g in sorted(per) if per[g]["binding"] == "rollout"]
        ft = f"{first_train}/{32 - first_train}" if first_train else "never (rollout binds everywhere)"
        lr = f"{max(rollout_bound)}/{32 - max(rollout_bound)}" if rollout_bound else "-"
        lines.append(f"| {tp} | {st} | {ft} | {lr} |")
    lines.append("")
    with open(os.path.join(out, "timing.json"), encoding="utf-8") as fh:
        t = json.load(fh)
    with open(os.path.join(out, "report.md"), encoding="utf-8") as fh:
        rep = fh.read()
    agree = next((ln for ln in rep.splitlines() if " agree within " in ln), "")
    lines += [f"Sweep: {t['points']} points, {t['simulated']} simulated in {t['simulate_s']:.0f} s "
              f"({t['points_per_s']:.1f} points/s; {t['total_s']:.0f} s in all, on this machine). Oracle re-check: "
              f"{agree}", "", "Plots: crossover.png (step time and binding by split), sweep.png (Pareto front, heatmap).",
              ""]
    text = "\n".join(lines)
    from simrl.atomic import atomic_write

    atomic_write(os.path.join(out, "answer.md"), text)
    _plot(out, cross)
    print(text)


def _plot(out: str, cross) -> None:
    import altair as alt

    recs = []
    for (tp, st), (_, per) in cross.items():
        if st != max(s for _, s in cross):
            continue
        for g, r in sorted(per.items()):
            for part, col in (("trainer waiting (rollout)", "wait_frac"), ("training", "train_frac"),
                              ("weight sync", "sync_frac")):
                recs.append({"rollout_gpus": g, "tp": f"rollout TP{tp}", "part": part,
                             "seconds": r["step_time_s"] * r[col], "binding": r["binding"]})
    data = alt.Data(values=recs)
    bars = alt.Chart(data).mark_bar().encode(
        x=alt.X("rollout_gpus:O", title="rollout GPUs (training = 32 - rollout)"),
        y=alt.Y("sum(seconds):Q", title="step time (s), split by phase"),
        color=alt.Color("part:N", title="phase"), tooltip=["rollout_gpus:O", "part:N", "seconds:Q", "binding:N"],
    ).properties(width=260, height=240).facet(column=alt.Column("tp:N", title=None))
    chart = bars.properties(title=f"gpu32: where the step is bound (best point per split, staleness bound "
                                  f"{max(s for _, s in cross)})")
    from simrl.atomic import atomic_write

    atomic_write(os.path.join(out, "crossover.html"), chart.to_html())
    import vl_convert as vlc

    atomic_write(os.path.join(out, "crossover.png"), vlc.vegalite_to_png(chart.to_json(), scale=1.5))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "outputs/gpu32")
