"""The comparison table across runs (one run's summary is `harness.summary`).

Rank-1 LoRA runs are supplemental and always land in a separate table from rank 8. `bench
report` re-validates each directory and shows the figures recomputed from its evidence, with
the fresh verdict, never the manifest's recorded numbers; the same run given twice is refused.
Trainer columns are blank ("-") where the per-rank intervals were not native.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import BenchError
from harness.summary import COLUMNS, _fmt, summary, summary_markdown

__all__ = ["COLUMNS", "comparison_markdown", "load_summaries", "summary", "summary_markdown"]

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
