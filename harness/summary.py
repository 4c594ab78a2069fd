"""One run's summary (summary.json / summary.md), from its manifest or a fresh verdict.

Split from `report` so that validation, which checks the summaries a run wrote against its
manifest, does not import the report (which re-validates).
"""

from __future__ import annotations

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
