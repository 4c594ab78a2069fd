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
        # a copy of a run would count it twice: the same run id, the same lease, or the same
        # evidence under other ids (a copy whose identity was rewritten) is refused
        keys = [("run", (man.get("identity") or {}).get("run_id")),
                ("lease", (man.get("lease") or {}).get("lease_id")), ("evidence", evidence_fingerprint(Path(d)))]
        for what, key in keys:
            if key is not None and (what, key) in seen:
                raise BenchError(f"{d}: {'run ' + str(key) if what == 'run' else what + ' ' + str(key)[:16]} "
                                 f"is already in this report (from {seen[what, key]}): the same run twice")
        for what, key in keys:
            if key is not None:
                seen[what, key] = d
        try:
            out.append(summary(man, validate(Path(d))))
        except (ValueError, KeyError, TypeError) as exc:
            raise BenchError(f"{path}: manifest unusable ({type(exc).__name__}: {exc})") from exc
    return out


# The measured timeline: what makes a run's figures, and what two independent runs never share to
# the last bit (two sim runs of one configuration do: they are one measurement).
_TIMELINE = {"updates.jsonl": ("k", "d_k", "train_end", "publish_end", "c_k", "rank_intervals"),
             "turns.jsonl": ("trajectory", "turn", "arrival", "first_token", "finish")}


def evidence_fingerprint(run_dir: Path) -> str | None:
    """sha256 of the evidence's timeline (None without evidence): ids, sequence numbers, write
    times and every other field left out, so a copy with its identity (or any field that does
    not make a figure) rewritten has the fingerprint of the run it was copied from."""
    import hashlib
    import json

    h, any_line = hashlib.sha256(), False
    for name, keys in _TIMELINE.items():
        path = Path(run_dir) / name
        if not path.is_file():
            continue
        h.update(name.encode() + b"\0")
        for line in path.read_bytes().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                h.update(line)
                continue
            if isinstance(row, dict):
                row = [row.get(k) for k in keys]
            h.update(json.dumps(row, sort_keys=True).encode() + b"\n")
            any_line = True
    return h.hexdigest() if any_line else None


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
