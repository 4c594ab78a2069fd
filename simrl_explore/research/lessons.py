"""The lessons file: one JSON object a line (``lessons.jsonl``), rendered to ``lessons.md`` next to it.

A lesson's ``id`` is a hash of its content, so re-running the same study does not duplicate it.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.1%}"


def read_lessons(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not a JSON object ({exc.msg})") from None
            if not isinstance(obj, dict) or "id" not in obj or "candidate" not in obj:
                raise ValueError(f"{path}:{n}: not a lesson (needs id, candidate, evidence)")
            out.append(obj)
    return out


def append_lesson(path: str, lesson: dict) -> None:
    """Append (unless a lesson with the same id is there) and re-render the Markdown next to it."""
    from simrl.atomic import atomic_write

    lessons = read_lessons(path)
    if all(ls["id"] != lesson["id"] for ls in lessons):
        lessons.append(lesson)
    atomic_write(path, "".join(json.dumps(ls, sort_keys=True, default=_json) + "\n" for ls in lessons))
    atomic_write(os.path.splitext(path)[0] + ".md", lessons_md(lessons))


def _json(x: Any):
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(type(x).__name__)


def lessons_md(lessons: list[dict]) -> str:
    lines = ["# Lessons", "", "Written by `srl-research`'s analysis agent; read by later proposals "
             "(same family, objective and variation).", ""]
    for ls in lessons:
        c = ls["conditions"]
        lines += [f"## {ls['id']}: {ls['candidate']['name']} vs {ls['baseline']['name']}", "",
                  f"- question: {ls['question']}", f"- lesson: {ls['claim']}",
                  f"- holds when: better for {c['variable']} in {c['better'] or 'none'}; worse in {c['worse'] or 'none'}"
                  + (f"; flips at {c['variable']} ~ {c['flip_at']:.2f}" if c.get("flip_at") is not None else ""),
                  f"- evidence: {ls['evidence']['runs']} paired SimPy runs, seeds {ls['evidence']['seeds']}, "
                  f"{ls['evidence']['interval']} interval at {ls['evidence']['confidence']:.0%}", "",
                  f"| {c['variable']} | n | mean | low | high | verdict |", "|---|---|---|---|---|---|"]
        for r in ls["evidence"]["per_variation"]:
            lines.append(f"| {r['value']} | {r['n']} | {_pct(r['mean'])} | {_pct(r['low'])} | {_pct(r['high'])} | "
                         f"{r['verdict']} |")
        lines.append("")
    return "\n".join(lines)
