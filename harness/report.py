"""Summaries of one run (summary.json / summary.md) and the comparison table across runs.

Rank-1 LoRA runs are supplemental and always land in a separate table from rank 8. `bench
report` re-validates each directory and shows the figures recomputed from its evidence, with
the fresh verdict, never the manifest's recorded numbers. Trainer columns are blank ("-")
where the per-rank intervals were not native.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import BenchError

COLUMNS = (
    ("updates/h", "updates_per_hour", "{:.2f}"),
    ("s/update", "seconds_per_update", "{:.2f}"),
    ("accepted tok/s", "accepted_trained_tokens_per_s", "{:.1f}"),
    ("sampled tok/s", "sampled_tokens_per_s", "{:.1f}"),
    ("groups/s", "trained_groups_per_s", "{:.4f}"),
    ("traj/s", "trained_trajectories_per_s", "{:.4f}"),
    ("trainer tok/s", "trainer_tokens_per_s", "{:.1f}"),
    ("trainer duty", "trainer_duty", "{:.3f}"),
    ("rank skew max s", "rank_skew_max_s", "{:.3f}"),
)


def _fmt(fmt: str, v) -> str:
    return "-" if v is None else fmt.format(v)


def summary(man: dict, verdict: dict | None = None) -> dict:
    """One run's summary; with ``verdict`` (a fresh `validate`), its recomputed figures and verdict."""
    ident, res = man["identity"], man.get("results", {})
    if verdict is not None:
        res = verdict.get("recomputed") or {}
    out = {
        "run_id": ident["run_id"], "backend": ident["backend"], "workload": ident["workload"],
        "runtime": ident["runtime"], "lora_rank": man["model"]["lora"]["rank"],
        "groups_per_update": man["pipeline"].get("groups_per_update"),
        "status": man["status"], "verdict": man.get("validation", {}).get("verdict"),
        "reasons": man.get("reasons", []), "headline": res.get("headline", {}),
        "measured": res.get("measured", {}), "secondary": res.get("secondary", {}),
    }
    if verdict is not None:
        out["verdict"], out["reasons"] = verdict["verdict"], verdict["reasons"]
    return out


def summary_markdown(s: dict) -> str:
    h = s["headline"]
    lines = [f"# Run {s['run_id']}", "",
             f"- backend **{s['backend']}**, workload **{s['workload']}**, runtime {s['runtime']}, "
             f"LoRA rank {s['lora_rank']}{' (supplemental)' if s['lora_rank'] != 8 else ''}",
             f"- status **{s['status']}**, verdict **{s['verdict']}**"]
    lines += [f"  - {r}" for r in s["reasons"]]
    lines += ["", "Headline window (c_15, c_20]:", "", "| metric | value |", "|---|---|"]
    lines += [f"| {label} | {_fmt(fmt, h.get(key))} |" for label, key, fmt in COLUMNS]
    sec = s["secondary"]
    lines += ["", f"Staleness max {sec.get('staleness_max')}, violations {sec.get('staleness_violations')}; "
              f"discarded stale {sec.get('discarded_stale_groups')}, "
              f"zero-variance {sec.get('discarded_zero_variance_groups')}.", ""]
    return "\n".join(lines)


def load_summaries(dirs: list[Path]) -> list[dict]:
    """Summaries re-validated now: figures recomputed from each directory's evidence."""
    from harness import manifest as M
    from harness.validate import validate

    out, seen = [], {}
    for d in dirs:
        path = Path(d) / "manifest.json"
        if not path.exists():
            raise BenchError(f"{d}: not a results directory (no manifest.json)")
        man = M.load(path)
        run_id = man.get("identity", {}).get("run_id")
        if run_id in seen:  # a copy of a run would count it twice in the comparison
            raise BenchError(f"{d}: run {run_id} is already in this report (from {seen[run_id]})")
        seen[run_id] = d
        try:
            out.append(summary(man, validate(Path(d))))
        except (ValueError, KeyError, TypeError) as exc:
            raise BenchError(f"{path}: manifest unusable ({type(exc).__name__}: {exc})") from exc
    return out


def comparison_markdown(summaries: list[dict]) -> str:
    """One table per LoRA rank (rank 1 separate), rows sorted by workload then backend."""
    parts = []
    for rank in sorted({s["lora_rank"] for s in summaries}, key=lambda r: (r != 8, r)):
        rows = sorted((s for s in summaries if s["lora_rank"] == rank),
                      key=lambda s: (s["workload"], s["backend"], s["run_id"]))
        title = f"## LoRA rank {rank}" + (" (supplemental; not comparable with rank 8)" if rank != 8 else "")
        head = ["workload", "backend", "runtime", "B", "verdict", *[c[0] for c in COLUMNS]]
        parts += [title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for s in rows:
            h = s["headline"]
            cells = [s["workload"], s["backend"], s["runtime"], str(s["groups_per_update"]),
                     s["verdict"] or s["status"], *[_fmt(fmt, h.get(key)) for _, key, fmt in COLUMNS]]
            parts.append("| " + " | ".join(cells) + " |")
        parts.append("")
    invalid = [s for s in summaries if s["verdict"] != "VALID"]
    if invalid:
        parts.append("Runs not VALID are shown for completeness; do not compare their rates.")
    if any(s["headline"].get("trainer_rates") == "not native" for s in summaries):
        parts.append("Trainer columns are '-' where the backend gave no native per-rank intervals "
                     "(trainer rates not native; excluded from the headline).")
    return "\n".join(parts) + "\n"
