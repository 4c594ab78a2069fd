"""Writing a run to ``outputs/<run-name>/``: resolved config, telemetry, report, plots.

Every file is written atomically (temporary file in the same directory, fsync, rename), and
`srl` builds the whole directory beside its final place and renames it in
(`simrl.atomic.staged_dir`), so a crash never leaves a half-written report and a rerun never
leaves the previous run's files beside the new ones. Same config and seed give byte-identical files.
"""

from __future__ import annotations

import json
from pathlib import Path

from simrl.atomic import atomic_write
from simrl.config import SimConfig, to_yaml
from simrl.report import Report, _round

TELEMETRY_SCHEMA = "simrl.telemetry.v1"


def telemetry_lines(events: list[dict], samples: list[tuple]) -> str:
    """JSONL: a header, then events and occupancy samples in time order (stable)."""
    out = [json.dumps({"schema": TELEMETRY_SCHEMA}, sort_keys=True)]
    rows = [(e["t"], 0, i, e) for i, e in enumerate(events)]
    rows += [
        (s[0], 1, i, {"t": s[0], "kind": "sample", "inst": s[1], "waiting": s[2], "running": s[3],
                      "kv_used": s[4], "router_queue": s[5]})
        for i, s in enumerate(samples)
    ]
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    out.extend(json.dumps(_round(r[3]), sort_keys=True, separators=(",", ":")) for r in rows)
    return "\n".join(out) + "\n"


def render_markdown(report: Report, plots: tuple[str, ...] = (), png: bool = True) -> str:
    """The run report in Markdown; ``plots`` names the views under plots/ to embed (relative
    links): the PNG images when ``png``, else links to the interactive HTML views."""
    t = report.totals
    lines = [
        f"# SimRL run `{report.run_name}`",
        "",
        f"Policy `{report.policy}`, seed {report.seed}, workload `{report.workload['name']}` "
        f"({report.workload['groups']} groups, schedule `{report.workload['schedule_sha256'][:12]}`).",
        "",
    ]
    if report.diagnosis:
        lines += ["**The run stopped early:**", "", "```", report.diagnosis, "```", ""]
    if plots:
        from simrl.plots import PLOT_TITLES

        lines += ["## Plots", ""]
        if png:
            for name in plots:
                lines += [f"![{PLOT_TITLES.get(name, name)}](plots/{name}.png)", ""]
            lines += ["Interactive versions: `plots/<name>.html`.", ""]
        else:
            lines += [f"- [{PLOT_TITLES.get(name, name)}](plots/{name}.html)" for name in plots]
            lines += ["", "Interactive views (open in a browser). PNG images: `srl --png ...`, or "
                      "`srl-plot RUN_DIR` afterwards.", ""]
    lines += ["## Totals", "", "| quantity | value |", "|---|---|"]
    for k in sorted(t):
        v = t[k]
        lines.append(f"| {k} | {json.dumps(_round(v), sort_keys=True)} |")
    lines += ["", "## Training steps", "",
              "| step | wait start | batch ready | train | publish end | groups | trained tokens | staleness max "
              "| bound by | wait: rollout / staleness bound / concurrency cap |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for s in report.steps:
        w = s.wait_s
        lines.append(
            f"| {s.step} | {s.wait_start:.3f} | {s.batch_ready:.3f} | {s.train_end - s.train_start:.3f} | "
            f"{s.publish_end:.3f} | {s.groups} | {s.trained_completion_tokens} | {max(s.staleness, default=0)} "
            f"| {s.binding_limit} | {w.get('rollout', 0.0):.3f} / {w.get('staleness_bound', 0.0):.3f} / "
            f"{w.get('concurrency_cap', 0.0):.3f} |"
        )
    lines += ["", "The binding limit of a step is the largest of its wait parts, its training time and its "
              "weight sync (docs/model.md, \"Binding limit of a step\")."]
    phased = [s for s in report.steps if s.phases_s]
    if phased:
        names = list(phased[0].phases_s)
        lines += ["", "## Training phases (s)", "", "| step | " + " | ".join(names) + " |",
                  "|---" * (len(names) + 1) + "|"]
        for s in phased:
            lines.append(f"| {s.step} | " + " | ".join(f"{s.phases_s.get(n, 0.0):.3f}" for n in names) + " |")
        lines.append("| total | " + " | ".join(f"{sum(s.phases_s.get(n, 0.0) for s in phased):.3f}"
                                              for n in names) + " |")
    lines += colocated_markdown(report)
    if report.queue_depth:
        depth = report.queue_depth
        lines += ["", "## Queue and buffer depth", "",
                  f"{len(depth)} changes recorded (report.json `queue_depth`: t, groups in flight, "
                  "finished groups buffered, groups being trained, buffered groups per oldest version).", "",
                  "| quantity | max | time-weighted mean |", "|---|---|---|"]
        t_end = max(report.totals.get("makespan_s", 0.0), depth[-1][0])
        for idx, name in ((1, "groups in flight"), (2, "groups buffered (finished, not trained)"),
                          (3, "groups being trained")):
            area = sum(d[idx] * ((depth[i + 1][0] if i + 1 < len(depth) else t_end) - d[0])
                       for i, d in enumerate(depth))
            lines.append(f"| {name} | {max(d[idx] for d in depth)} | {area / t_end if t_end > 0 else 0.0:.3f} |")
    lines += ["", "## Rollout instances", "", "| instance | busy fraction | iterations | preemptions |",
              "|---|---|---|---|"]
    for i in report.instances:
        lines.append(f"| {i['index']} | {i['busy_fraction']:.3f} | {i['iterations']} | {i['preemptions']} |")
    lines += ["", "## Cost-model validity", ""]
    if report.domain_warnings:
        lines += ["| model | dimension | range | queries outside | worst value |", "|---|---|---|---|---|"]
        for w in report.domain_warnings:
            lines.append(f"| {w['model']} | {w['dimension']} | {w['range']} | {w['queries_outside']} | "
                         f"{w['worst_value']:.6g} |")
    else:
        lines.append("Every cost-model query stayed inside its validity domain.")
    if report.cost_provenance:
        from simrl.cost.provenance import provenance_markdown

        lines += ["", "## Cost provenance", "", *provenance_markdown(report.cost_provenance)]
    return "\n".join(lines) + "\n"


COLOCATED_PHASE_TEXT = {
    "sleep": "vLLM sleep: engine weights to pinned host memory (level 1; level 2 discards them)",
    "load_params": "trainer parameters host -> GPU (param_offload)",
    "load_grads": "trainer gradient buffer re-allocated and zeroed (grad_offload; never copied)",
    "load_optimizer": "trainer optimizer states host -> GPU (optimizer_offload)",
    "offload_optimizer": "trainer optimizer states GPU -> host",
    "wake_weights": "vLLM wake_up(weights): old weights host -> GPU (level 1)",
    "reshard": "refit: full parameters gathered from the training layout, loaded into the engine's TP shard",
    "offload_params": "trainer parameters GPU -> host",
    "kv_rebuild": "vLLM wake_up(kv_cache): KV pool re-mapped, not written (0 s)",
}


def colocated_markdown(report: Report) -> list[str]:
    """The colocated phases as their own table (empty list when the run is not colocated): seconds
    per step, when each runs (before training: rollout -> train; after: train -> rollout) and the
    total over the steps. Each step pays every phase once."""
    phases = report.colocated_phases
    if not phases:
        return []
    from simrl.cost.colocated import BEFORE

    n = len(report.steps)
    lines = ["", "## Colocated phases (s)", "",
             "Rollout and training share the GPUs: every step switches them to the trainer and back "
             "(bytes over the host link, the collective link or HBM; simrl.cost.colocated).", "",
             "| phase | when | what | per step | steps | total |", "|---|---|---|---|---|---|"]
    for name, sec in phases.items():
        when = "before training" if name in BEFORE else "after training"
        lines.append(f"| {name} | {when} | {COLOCATED_PHASE_TEXT.get(name, '')} | {sec:.3f} | {n} | {sec * n:.3f} |")
    per_step = sum(phases.values())
    lines.append(f"| total | | | {per_step:.3f} | {n} | {per_step * n:.3f} |")
    return lines


def run_dir(cfg: SimConfig, report: Report) -> Path:
    """Where a run's directory goes: ``<run.output_dir>/<run name>``."""
    return Path(cfg.run.output_dir) / report.run_name


def write_run(cfg: SimConfig, report: Report, events: list[dict], samples: list[tuple],
              out: Path | None = None, png: bool = True) -> Path:
    """Write the run's files into ``out`` (default `run_dir`) and return it.

    The CLI passes a staged directory (`simrl.atomic.staged_dir`) that replaces the run directory
    whole once the plots are written too.
    """
    out = run_dir(cfg, report) if out is None else Path(out)
    atomic_write(out / "config.yaml", to_yaml(cfg))
    if cfg.run.telemetry:
        atomic_write(out / "telemetry.jsonl", telemetry_lines(events, samples))
    atomic_write(out / "report.json", report.to_json())
    from simrl.plots import PLOT_NAMES

    atomic_write(out / "report.md", render_markdown(report, PLOT_NAMES if cfg.run.plots else (), png))
    return out
