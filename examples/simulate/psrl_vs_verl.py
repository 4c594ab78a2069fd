"""Answer "with staleness bounded at 2 and the same batch size, does PSRL stay latency-bound while
verl's overage queue slowly fills up?" from the four runs `psrl_vs_verl.sh` writes.

    python examples/simulate/psrl_vs_verl.py OUT [--no-png]

OUT holds ``rollout_bound/{psrl,verl}`` and ``trainer_bound/{psrl,verl}`` run directories
(report.json, telemetry.jsonl, config.yaml). Writes ``OUT/psrl_vs_verl.md`` (the answer, every
figure computed from those files), ``OUT/psrl_vs_verl.{html,png}`` (the batch-assembly plot,
`simrl.plots.batches`) and prints the answer. Deterministic: the same runs give the same files.

What is measured (per run, `simrl.plots.batches.step_rows`):

* *straggler wait*: time the trainer waited for its next batch although a full batch's worth of
  finished groups was already queued, i.e. it waited for particular slow groups (PSRL: the
  slowest reserved group of the buffer it consumes next), not for generation throughput. PSRL is
  called latency-bound in a deployment when straggler wait is at least half of its trainer's wait.
* *queued for a later batch* at each batch take: finished groups that the batch did not take
  (PSRL: groups in later per-version buffers; verl fully_async: the MessageQueue's overage beyond
  the window). verl's overage queue is said to fill up when it ends the run at least half full
  (of the room M - window the sample budget leaves) and fuller than in the run's first third.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEPLOYMENTS = ("rollout_bound", "trainer_bound")
PRESETS = ("psrl", "verl")
CAUSES = ("rollout", "staleness_bound", "concurrency_cap")


def load_run(path: Path) -> dict:
    from simrl.config import load_config

    report = json.loads((path / "report.json").read_text(encoding="utf-8"))
    events = []
    with open(path / "telemetry.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if "kind" in row:
                events.append(row)
    cfg = load_config(str(path / "config.yaml"))
    return {"report": report, "events": events, "cfg": cfg, "path": path}


def batch_groups(run: dict) -> int:
    pol = run["cfg"].policy
    return pol.staleness_buffer_entries if pol.kind == "psrl" else pol.window_groups


def deployment_text(cfg) -> str:
    d = cfg.deployment
    r, t = d.rollout, d.training
    return (f"{r.instances} rollout instance{'s' if r.instances != 1 else ''} (TP{r.tp}, {r.gpu}) + "
            f"{t.gpus} training GPUs (TP{t.tp}, DP{t.dp}, {t.gpu}) = {r.instances * r.tp + t.gpus} GPUs")


def summarize(run: dict) -> dict:
    from simrl.plots.batches import step_rows

    rep = run["report"]
    t = rep["totals"]
    rows = step_rows(rep, run["events"], batch_groups(run))
    depth = rep["queue_depth"]

    def in_flight_at(time: float) -> int:
        return [q for q in depth if q[0] <= time][-1][1]

    for r, s in zip(rows, rep["steps"], strict=True):
        r["in_flight_at_ready"] = in_flight_at(s["batch_ready"])
    wait = sum(r["wait_s"] for r in rows)
    strag = sum(r["straggler_wait_s"] for r in rows)
    bound = {k: v for k, v in t["binding_limit_steps"].items() if v}
    return {"rows": rows, "makespan": t["makespan_s"], "wait": wait, "straggler": strag,
            "trainer_busy": t["trainer_busy_fraction"], "rollout_busy": t["rollout_busy_fraction"],
            "bound": bound, "stale_max": t["staleness_max"], "stale_mean": t["staleness_mean"],
            "tok_s": t["trained_tokens_per_s"], "steps": len(rows), "by_cause": t["trainer_wait_by_cause_s"]}


def causes(by_cause: dict) -> str:
    return " / ".join(f"{by_cause.get(k, 0.0):.1f}" for k in CAUSES)


def binding_text(bound: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(bound.items(), key=lambda kv: (-kv[1], kv[0])))


def dominant(bound: dict) -> str:
    return max(sorted(bound), key=lambda k: bound[k]) if bound else "none"


def psrl_verdict(s: dict) -> tuple[bool, str]:
    rows = s["rows"]
    strag_steps = [r for r in rows if r["straggler_wait_s"] > 0]
    latency_bound = s["straggler"] > 0 and s["straggler"] >= 0.5 * s["wait"]
    if not strag_steps:
        return False, (f"no: its trainer never waited with a full batch of finished groups queued "
                       f"(trainer waited {s['wait']:.0f} s of {s['makespan']:.0f} s, all for throughput)")
    worst = max(strag_steps, key=lambda r: (r["straggler_wait_s"], -r["step"]))
    return latency_bound, (
        f"{'yes' if latency_bound else 'partly'}: in {len(strag_steps)} of {s['steps']} steps the trainer waited on "
        f"the slowest reserved group of its next buffer while a full batch's worth of finished groups was "
        f"already queued: {s['straggler']:.0f} s of its {s['wait']:.0f} s of waiting "
        f"({s['straggler'] / s['makespan']:.0%} of the {s['makespan']:.0f} s run). Worst: step {worst['step']} "
        f"waited {worst['wait_s']:.1f} s for a group dispatched at {worst['slowest_dispatch']:.1f} s that took "
        f"{worst['slowest_latency_s']:.1f} s, while {worst['later_queued_at_ready']} finished groups sat in "
        f"later per-version buffers")


def verl_verdict(s: dict, cfg) -> tuple[bool, str]:
    rows = s["rows"]
    m, w = cfg.policy.queue_size, cfg.policy.window_groups
    room = m - w
    over = [r["later_queued_at_ready"] for r in rows]
    third = max(1, len(over) // 3)
    first, last = sum(over[:third]) / third, sum(over[-third:]) / third
    fills = over[-1] >= 0.5 * room and last > first
    flight = [r["in_flight_at_ready"] for r in rows]
    per_step = ", ".join(str(x) for x in over)
    return fills, (
        f"{'yes' if fills else 'no'}: groups left in the MessageQueue after each batch of {w} was taken: "
        f"{per_step} (max {max(over)} of the {room} its sample budget M = {m} leaves beyond a window; "
        f"mean {first:.1f} over the first third of the steps, {last:.1f} over the last). Meanwhile "
        f"{min(flight) if min(flight) == max(flight) else f'{min(flight)}-{max(flight)}'} groups were still generating at each batch take, carried across "
        f"weight syncs by partial rollout; that is where its staleness comes from: max {s['stale_max']}, "
        f"mean {s['stale_mean']:.2f} (verl fully_async has no per-sample bound)")


def step_table(sp: dict, sv: dict) -> list[str]:
    out = ["| step | psrl wait (s) | psrl straggler wait (s) | psrl slowest group (s) | psrl groups in later buffers "
           "| psrl bound by | verl wait (s) | verl queue overage | verl in flight | verl staleness max | verl bound by |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p, v in zip(sp["rows"], sv["rows"], strict=True):
        out.append(f"| {p['step']} | {p['wait_s']:.1f} | {p['straggler_wait_s']:.1f} | {p['slowest_latency_s']:.1f} | "
                   f"{p['later_queued_at_ready']} | {p['binding_limit']} | {v['wait_s']:.1f} | "
                   f"{v['later_queued_at_ready']} | {v['in_flight_at_ready']} | {v['staleness_max']} | "
                   f"{v['binding_limit']} |")
    return out


def answer(out: Path, png: bool = True) -> str:
    from simrl.plots.batches import assembly_rows, write_assembly

    runs = {(d, p): load_run(out / d / p) for d in DEPLOYMENTS for p in PRESETS}
    sums = {k: summarize(r) for k, r in runs.items()}
    cfg0 = runs[(DEPLOYMENTS[0], "psrl")]["cfg"]
    wl = cfg0.workload
    steps = sums[(DEPLOYMENTS[0], "psrl")]["steps"]
    batch = batch_groups(runs[(DEPLOYMENTS[0], "psrl")])
    for k, r in runs.items():
        if batch_groups(r) != batch:
            raise SystemExit(f"{out / k[0] / k[1]}: batch of {batch_groups(r)} groups, expected {batch} (same batch size)")
    lines = ["# With staleness bounded at 2 and the same batch size, does PSRL stay latency-bound while "
             "verl's overage queue slowly fills up?", "",
             f"Written by `examples/simulate/psrl_vs_verl.sh` from its four runs: {cfg0.deployment.model} on "
             f"{cfg0.deployment.rollout.gpu}s, workload `{wl.generator}` ({wl.groups} groups), {steps} training "
             f"steps of {batch} groups for both presets, `srl --staleness 2` (psrl: `policy.staleness=2`; verl: "
             f"`policy.mode=fully_async policy.staleness_threshold=2.0`, a sample budget, not a per-sample bound), "
             f"cost models `{cfg0.cost.rollout}` / `{cfg0.cost.training}`.", "", "## Answer", ""]
    verdicts = {}
    for d in DEPLOYMENTS:
        sp, sv = sums[(d, "psrl")], sums[(d, "verl")]
        pl, ptxt = psrl_verdict(sp)
        vf, vtxt = verl_verdict(sv, runs[(d, "verl")]["cfg"])
        verdicts[d] = (pl, vf)
        label = d.replace("_", "-")
        lines += [f"**{label}** ({deployment_text(runs[(d, 'psrl')]['cfg'])}; verl's steps bound by "
                  f"{binding_text(sv['bound'])}):", "",
                  f"* PSRL latency-bound? {ptxt}.",
                  f"* verl's overage queue fills up? {vtxt}.",
                  f"* Makespan: psrl {sp['makespan']:.0f} s, verl {sv['makespan']:.0f} s "
                  f"(trained tokens/s {sp['tok_s']:,.0f} vs {sv['tok_s']:,.0f}).", ""]
    same = len({v for v in verdicts.values()}) == 1
    pl_all = [verdicts[d][0] for d in DEPLOYMENTS]
    vf_all = [verdicts[d][1] for d in DEPLOYMENTS]
    if same:
        lines.append(f"Across deployments: the answer is the same in both: PSRL latency-bound "
                     f"{'yes' if pl_all[0] else 'no'}, verl's overage queue fills up {'yes' if vf_all[0] else 'no'}.")
    else:
        diff = [f"{d.replace('_', '-')}: PSRL latency-bound {'yes' if verdicts[d][0] else 'no'}, verl queue fills "
                f"{'yes' if verdicts[d][1] else 'no'}" for d in DEPLOYMENTS]
        lines.append("Across deployments the answer differs: " + "; ".join(diff) + ".")
    rb, tb = sums[("rollout_bound", "verl")], sums[("trainer_bound", "verl")]
    lines += ["", f"What does differ by deployment is what verl's trainer does: "
              f"{rb['trainer_busy']:.0%} busy rollout-bound, {tb['trainer_busy']:.0%} trainer-bound, against PSRL's "
              f"{sums[('rollout_bound', 'psrl')]['trainer_busy']:.0%} and {sums[('trainer_bound', 'psrl')]['trainer_busy']:.0%}.",
              "", "## Deployments: what bound each step", "",
              "| deployment | GPUs | preset | makespan (s) | steps bound by | trainer busy | rollout busy "
              "| trainer wait (s): rollout / staleness bound / concurrency cap | straggler wait (s) | staleness max / mean |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for d in DEPLOYMENTS:
        for p in PRESETS:
            s = sums[(d, p)]
            lines.append(f"| {d.replace('_', '-')} | {deployment_text(runs[(d, p)]['cfg'])} | {p} | {s['makespan']:.1f} | "
                         f"{binding_text(s['bound'])} | {s['trainer_busy']:.2f} | {s['rollout_busy']:.2f} | "
                         f"{s['wait']:.1f}: {causes(s['by_cause'])} | {s['straggler']:.1f} | {s['stale_max']} / {s['stale_mean']:.2f} |")
    lines += ["", "A step is bound by the largest of its wait parts (rollout, staleness bound, concurrency cap), its "
              "training and its weight sync (docs/model.md, \"Binding limit of a step\"). Straggler wait: the part of "
              "the trainer's wait during which a full batch's worth of finished groups was already queued.", ""]
    for d in DEPLOYMENTS:
        lines += [f"## Per step, {d.replace('_', '-')}", ""]
        lines += step_table(sums[(d, "psrl")], sums[(d, "verl")])
        lines += ["", "*psrl slowest group*: dispatch-to-done time of the last group of the batch; *groups in later "
                  "buffers* / *queue overage*: finished groups queued for a later batch when the batch was taken; "
                  "*in flight*: groups still generating then.", ""]
    panels = []
    for d in DEPLOYMENTS:
        for p in PRESETS:
            rows, waits = assembly_rows(runs[(d, p)]["report"], runs[(d, p)]["events"], f"{d}/{p}")
            panels.append((f"{d.replace('_', '-')}: {p} ({deployment_text(runs[(d, p)]['cfg'])})", rows, waits))
    write_assembly(out, "psrl_vs_verl", panels,
                   "Staleness 2, same batch: what the trainer waits for, and what waits for the trainer",
                   "red: groups of the next batch still generating; green: next batch, finished; blue: finished "
                   "groups queued for a later batch (PSRL: later per-version buffers; verl: MessageQueue overage); "
                   "dashed: the whole queue; grey: trainer waiting", png=png)
    lines += ["## Plot", "",
              "`psrl_vs_verl.png` and `psrl_vs_verl.html`, written beside this file in the output directory: one "
              "panel per run, over time, the groups of the batch the trainer takes next that are still generating "
              "(red) and finished (green), the finished groups queued for a later batch (blue: PSRL's later "
              "per-version buffers, verl's MessageQueue overage), the whole queue (dashed) and the trainer's waits "
              "(grey).", ""]
    text = "\n".join(lines)
    (out / "psrl_vs_verl.md").write_text(text, encoding="utf-8")
    return text


def main(argv: list[str]) -> None:
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 1 or any(a not in ("--no-png",) for a in argv if a.startswith("--")):
        raise SystemExit("usage: psrl_vs_verl.py OUT [--no-png]")
    out = Path(args[0])
    for d in DEPLOYMENTS:
        for p in PRESETS:
            if not (out / d / p / "report.json").exists():
                raise SystemExit(f"{out / d / p}: no report.json (run examples/simulate/psrl_vs_verl.sh first)")
    text = answer(out, png="--no-png" not in argv)
    head = text.split("## Deployments")[0]
    print(head.rstrip())
    print(f"\nanswer: {out / 'psrl_vs_verl.md'}; plot: {out / 'psrl_vs_verl.html'}")


if __name__ == "__main__":
    main(sys.argv[1:])
