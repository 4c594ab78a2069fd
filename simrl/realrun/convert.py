"""Converters into the real-run format: a simulated run directory and the harness's evidence.

`from_sim_run` lets a simulated run be compared with itself (zero error by construction);
`from_harness` reads the bench harness's ``updates.jsonl`` (+ ``turns.jsonl``); `load_run`
accepts any source, including a real-run JSONL and a PSRL log (see `simrl.realrun.psrl`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from simrl.realrun.format import RealRun, RealRunError, _fail, _step, read_json_objects, read_realrun
from simrl.report import _round
from simrl.strictio import load_json_file


def _generated_per_step(windows: list[tuple[float, float]], finishes: list[tuple[float, int]]) -> list[int]:
    """Completion tokens of requests finishing in each step window (start, end]; step 1 includes start."""
    out = []
    for i, (a, b) in enumerate(windows):
        out.append(sum(n for t, n in finishes if (a <= t if i == 0 else a < t) and t <= b))
    return out


def from_sim_report(report: dict, samples: list[dict] | None = None, model: str = "", source: str = "") -> RealRun:
    """A simulated run's report (the dict of report.json) as a real run, to compare it with itself.

    Phases: wait = batch_ready - wait_start, train = train_end - batch_ready (colocated offload
    included), sync = publish_end - train_end. ``samples`` are telemetry `sample` rows.
    """
    steps = report["steps"]
    windows = [(s["wait_start"], s["publish_end"]) for s in steps]
    finishes = [(c["finish"], c["generated_tokens"]) for c in report["calls"] if c["finish"] is not None]
    gen = _generated_per_step(windows, finishes)
    load_by_step: list[list[dict]] = [[] for _ in steps]
    for r in samples or ():
        for i, (a, b) in enumerate(windows):
            if (a <= r["t"] if i == 0 else a < r["t"]) and r["t"] <= b:
                load_by_step[i].append({"t": r["t"], "instance": r["inst"], "running": r["running"],
                                        "waiting": r["waiting"], "kv_used": r["kv_used"],
                                        "router_queue": r["router_queue"]})
                break
    out, prev = [], None
    for i, s in enumerate(steps):
        obj = {"step": s["step"], "start": s["wait_start"], "end": s["publish_end"],
               "train_s": s["train_end"] - s["batch_ready"], "sync_s": s["publish_end"] - s["train_end"],
               "generated_tokens": gen[i], "trained_tokens": s["trained_completion_tokens"],
               "staleness": list(s["staleness"]), "groups": s["groups"], "trajectories": s["trajectories"],
               "load": load_by_step[i] or None}
        # Rounded like every written float, so that writing and re-reading gives the same run.
        prev = _step(_round(obj), source or "report", i + 1, prev)
        out.append(prev)
    caps = {i.get("kv_capacity_tokens") for i in report.get("instances", ())}
    return RealRun(system=f"simrl:{report['policy']}", model=model, steps=tuple(out),
                   notes=f"converted from simulated run {report['run_name']} (seed {report['seed']})",
                   source=source, instances=len(report.get("instances", ())) or None,
                   kv_capacity_tokens=caps.pop() if len(caps) == 1 else None)


def _read_json(path: Path) -> Any:
    def fail(line: int, field: str | None, msg: str) -> RealRunError:
        return RealRunError(f"{path}{':' + str(line) if line else ''}: {'field ' + repr(field) + ': ' if field else ''}{msg}")

    return load_json_file(path, fail)


def from_sim_run(run_dir: str | Path) -> RealRun:
    """Convert a simulated run directory (report.json, optional telemetry.jsonl and config.yaml)."""
    run_dir = Path(run_dir)
    report = _read_json(run_dir / "report.json")
    if not isinstance(report, dict) or "steps" not in report or "calls" not in report:
        raise RealRunError(f"{run_dir / 'report.json'}: not a SimRL report (no 'steps'/'calls')")
    from simrl.plots.rundir import RunDirError, check_report_fields, check_telemetry_row

    samples = None
    tele = run_dir / "telemetry.jsonl"
    try:  # the fields the conversion reads, by the run-directory reader's rules (file and key named)
        check_report_fields({"instances": [], "run_name": "", **report}, run_dir / "report.json")
        if tele.exists():
            samples = []
            for n, o in read_json_objects(tele):
                if o.get("kind") == "sample":
                    check_telemetry_row(o, tele, n)
                    samples.append(o)
    except RunDirError as exc:
        raise RealRunError(str(exc)) from None
    model = ""
    cfg = run_dir / "config.yaml"
    if cfg.exists():
        import yaml

        try:
            model = str((yaml.safe_load(cfg.read_text(encoding="utf-8")) or {})
                        .get("deployment", {}).get("model", ""))
        except (yaml.YAMLError, AttributeError):
            model = ""
    return from_sim_report(report, samples, model=model, source=str(run_dir))


def model_label(model) -> str:
    """A human-readable model name: the harness manifest's model record (name, revision, dtype,
    LoRA) as ``name@revision12 dtype, LoRA rank R``; a string as it is."""
    if not isinstance(model, dict):
        return "" if model is None else str(model)
    label = str(model.get("name") or "model ?")
    if model.get("revision"):
        label += f"@{str(model['revision'])[:12]}"
    extra = [str(model["dtype"])] if model.get("dtype") else []
    lora = model.get("lora")
    if isinstance(lora, dict) and lora.get("rank") is not None:
        extra.append(f"LoRA rank {lora['rank']}")
    return label + (f" ({', '.join(extra)})" if extra else "")


UPDATE_REQUIRED = ("k", "d_k", "c_k", "train_end", "publish_end", "tokens")


def from_harness(results_dir: str | Path) -> RealRun:
    """Convert the bench harness's evidence: ``updates.jsonl`` (+ ``turns.jsonl``, ``manifest.json``).

    Step k spans (c_{k-1}, c_k]; step 1 starts at the first turn's arrival (or d_1 when there
    are no turns). train_s = train_end - d_k, sync_s = publish_end - train_end; generated tokens
    are the completion tokens of turns finishing inside the step.
    """
    d = Path(results_dir)
    upath = d / "updates.jsonl"
    if not upath.exists():
        raise RealRunError(f"{upath}: missing (not a harness results directory)")
    rows = read_json_objects(upath)
    if not rows:
        raise RealRunError(f"{upath}: no updates")
    for n, u in rows:
        for f in UPDATE_REQUIRED:
            if f not in u:
                raise _fail(upath, n, f, "missing")
    rows.sort(key=lambda r: int(r[1]["k"]))
    turns = [o for _, o in read_json_objects(d / "turns.jsonl")] if (d / "turns.jsonl").exists() else []
    finishes = [(float(t["finish"]), int(t["completion_tokens"])) for t in turns if t.get("finish") is not None]
    arrivals = [float(t["arrival"]) for t in turns if t.get("arrival") is not None]
    first = min([*arrivals, float(rows[0][1]["d_k"])])
    windows = []
    for i, (_, u) in enumerate(rows):
        windows.append((first if i == 0 else float(rows[i - 1][1]["c_k"]), float(u["c_k"])))
    gen = _generated_per_step(windows, finishes) if finishes else [int(u["tokens"]) for _, u in rows]
    steps, prev = [], None
    for i, (n, u) in enumerate(rows):
        obj = {"step": int(u["k"]), "start": windows[i][0], "end": windows[i][1],
               "train_s": float(u["train_end"]) - float(u["d_k"]),
               "sync_s": float(u["publish_end"]) - float(u["train_end"]),
               "generated_tokens": gen[i], "trained_tokens": int(u["tokens"]),
               "staleness": u.get("staleness"), "groups": u.get("groups"), "trajectories": u.get("trajectories")}
        prev = _step(_round(obj), upath, n, prev)
        steps.append(prev)
    man = _read_json(d / "manifest.json") if (d / "manifest.json").exists() else {}
    system = f"{man.get('backend', 'harness')}" if isinstance(man, dict) else "harness"
    model = model_label(man.get("model", "")) if isinstance(man, dict) else ""
    notes = "converted from bench harness evidence" + ("" if turns else "; no turns.jsonl: generated = trained")
    return RealRun(system=system, model=model, steps=tuple(steps), notes=notes, source=str(d))


def load_run(path: str | Path) -> RealRun:
    """A run from any source: a real-run JSONL, a simulated run dir, or a harness results dir."""
    p = Path(path)
    if p.is_dir():
        if (p / "updates.jsonl").exists():
            return from_harness(p)
        if (p / "report.json").exists():
            return from_sim_run(p)
        raise RealRunError(f"{p}: neither a simulated run (report.json) nor harness evidence (updates.jsonl)")
    if not p.exists():
        raise RealRunError(f"{p}: no such file or directory")
    run = read_realrun(p)
    return run if run.source else attrs.evolve(run, source=str(p))
