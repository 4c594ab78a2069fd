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
    from workloads.strictio import json_lines

    def fail(line: int, field: str | None, message: str) -> ValueError:
        return ValueError(f"{path}{f':{line}' if line else ''}: {f'{field}: ' if field else ''}{message}")

    out = []
    # strict JSON lines (UTF-8, no duplicate keys or NaN), and every field a later step reads
    for n, obj in json_lines(path, fail):
        if not isinstance(obj, dict):
            raise fail(n, None, f"not a lesson: expected a JSON object, got {type(obj).__name__}")
        for key, kind in LESSON_FIELDS.items():
            if not isinstance(obj.get(key), kind):
                raise fail(n, key, f"not a lesson: expected {'an object' if kind is dict else 'a string'}, "
                                   f"got {obj.get(key)!r:.40} (a lesson has {', '.join(LESSON_FIELDS)})")
        for key, sub in (("candidate", "name"), ("baseline", "name")):
            if not isinstance(obj[key].get(sub), str):
                raise fail(n, f"{key}.{sub}", "not a lesson: expected a string")
        overall = obj["evidence"].get("overall")
        if not isinstance(overall, dict) or not isinstance(overall.get("mean"), int | float) \
                or isinstance(overall.get("mean"), bool):
            raise fail(n, "evidence.overall.mean", "not a lesson: expected a number")
        out.append(obj)
    return out


# The fields of a lesson that proposals and lessons.md read (written by `agents`).
LESSON_FIELDS = {"id": str, "family": str, "candidate": dict, "baseline": dict, "evidence": dict,
                 "conditions": dict, "question": str, "claim": str}


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
