"""Collect per-call logs into a `Workload` (and so into a trace).

Two record shapes are accepted, one JSON object per line, mixed freely:

(a) the harness's ``turns.jsonl``: ``{group, trajectory (or sample), turn, prompt_tokens,
    completion_tokens, new_tokens?, tool_latency_s?, reward?, cache_salted?,
    shared_prompt_tokens?}``;
(b) OpenAI-compatible request logs: token counts in ``usage`` or ``response.usage``
    (``prompt_tokens``, ``completion_tokens``) and the identifiers (and optional reward,
    tool_latency_s, new_tokens) in ``metadata`` or ``request.metadata``; OpenAI metadata values
    are strings, so numbers may arrive as text. A ``cache_salt`` in the request marks the call
    salted.

Calls are ordered by (group, trajectory, turn), numerically when the ids are integers, so log
order (async rollouts finish out of order) does not matter. Errors name the file and line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from workloads import strictio
from workloads.trace import TraceError
from workloads.trace_parse import MAX_LATENCY_S, MAX_TOKENS, json_lines
from workloads.types import CallSpec, GroupSpec, TrajectorySpec, Workload, build_workload


def _dig(rec: dict, *paths: tuple[str, ...]) -> dict:
    for path in paths:
        node: Any = rec
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            return node
    return {}


def _number(path, line, field, value, integer: bool, minimum: float, required: bool = True,
            maximum: float = MAX_TOKENS, text: frozenset = frozenset()):
    if value is None:
        if required:
            raise TraceError(path, line, field, "missing")
        return None
    if isinstance(value, str) and field not in text:
        raise TraceError(path, line, field, f"expected a number, got the string {value!r:.40} (write it without "
                                            f"quotes; only OpenAI metadata values may be text)")
    if isinstance(value, str):  # OpenAI metadata values are strings
        try:
            value = int(value) if integer and value.strip().lstrip("-").isdigit() else float(value)
        except (ValueError, OverflowError):
            raise TraceError(path, line, field, f"expected a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceError(path, line, field, f"expected a finite number, got {value!r}")
    if integer and not float(value).is_integer():
        raise TraceError(path, line, field, f"expected an integer, got {value!r}")
    if value < minimum:
        raise TraceError(path, line, field, f"expected a value >= {minimum}, got {value!r}")
    if integer and not isinstance(value, int):
        raise TraceError(path, line, field, f"expected an integer, got {value!r} (a float is never truncated)")
    if value > maximum:
        raise TraceError(path, line, field, f"expected a value <= {maximum:g}, got {value!r}")
    return int(value) if integer else float(value)


def _ident(path, line, field, value):
    if value is None:
        raise TraceError(path, line, field, "missing (needed to place the call in its group)")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TraceError(path, line, field, f"expected an integer or string id, got {value!r}")
    if isinstance(value, str) and (not value.strip() or len(value) > 256):
        raise TraceError(path, line, field, f"expected a non-empty id of at most 256 characters, got {value[:40]!r}")
    return value


# Shape (a): the fields read, and the other fields the harness's turns.jsonl carries (kept, unused).
TURN_FIELDS = ("group", "trajectory", "sample", "turn", "prompt_tokens", "completion_tokens", "new_tokens",
               "tool_latency_s", "reward", "cache_salted", "shared_prompt_tokens")
HARNESS_TURN_FIELDS = ("forced_tokens", "finish_reason", "arrival", "first_token", "finish",
                       "policy_version_start", "policy_version_end")


def normalise_record(path, line: int, rec) -> dict:
    """One log record as ``{group, trajectory, turn, prompt_tokens, ...}`` (either shape)."""
    if not isinstance(rec, dict):
        raise TraceError(path, line, None, "expected a JSON object")
    usage = _dig(rec, ("usage",), ("response", "usage"))
    meta = _dig(rec, ("metadata",), ("request", "metadata"))
    if not usage:
        try:
            strictio.check_fields(rec, TURN_FIELDS + HARNESS_TURN_FIELDS)
        except strictio.StrictInputError as exc:
            raise TraceError(path, line, exc.field, exc.message + " (or an OpenAI log with 'usage')") from None
    src = {**meta, **usage} if usage else rec
    text = frozenset(set(meta) - set(usage)) if usage else frozenset()  # metadata values may be strings
    traj = src.get("trajectory", src.get("sample"))
    salted = src.get("cache_salted")
    if salted is None:
        salted = bool(rec.get("cache_salt") or _dig(rec, ("request",)).get("cache_salt"))
    elif not isinstance(salted, bool):
        raise TraceError(path, line, "cache_salted", f"expected true or false, got {salted!r}")
    return {
        "line": line,
        "group": _ident(path, line, "group", src.get("group")),
        "trajectory": _ident(path, line, "trajectory", traj),
        "turn": _number(path, line, "turn", src.get("turn"), True, 0, maximum=strictio.INT_MAX, text=text),
        "prompt_tokens": _number(path, line, "prompt_tokens", src.get("prompt_tokens"), True, 1, text=text),
        "completion_tokens": _number(path, line, "completion_tokens", src.get("completion_tokens"), True, 1, text=text),
        "new_tokens": _number(path, line, "new_tokens", src.get("new_tokens"), True, 0, required=False, text=text),
        "tool_latency_s": _number(path, line, "tool_latency_s", src.get("tool_latency_s"), False, 0,
                                  required=False, maximum=MAX_LATENCY_S, text=text) or 0.0,
        "reward": _number(path, line, "reward", src.get("reward"), False, -math.inf, required=False,
                          maximum=math.inf, text=text),
        "shared_prompt_tokens": _number(path, line, "shared_prompt_tokens", src.get("shared_prompt_tokens"),
                                        True, 0, required=False, text=text),
        "cache_salted": salted,
        "path": str(path),
    }


def _order(ids) -> list:
    ids = list(ids)
    numeric = all(isinstance(i, int) or (isinstance(i, str) and i.lstrip("-").isdigit()) for i in ids)
    return sorted(ids, key=(lambda i: int(i)) if numeric else str)


def _trajectory(index: int, calls: list[dict], base: int) -> TrajectorySpec:
    calls = sorted(calls, key=lambda c: c["turn"])
    out, prev = [], None
    if calls[0]["turn"] != base:
        c = calls[0]
        raise TraceError(c["path"], c["line"], "turn", f"trajectory {c['trajectory']!r} of group {c['group']!r} "
                                                       f"starts at turn {c['turn']}; turn {base} is missing "
                                                       f"(other trajectories start at {base})")
    for c in calls:
        if prev is not None and c["turn"] == prev["turn"]:
            raise TraceError(c["path"], c["line"], "turn", f"duplicate turn {c['turn']} (also line {prev['line']})")
        if prev is not None and c["turn"] != prev["turn"] + 1:
            missing = prev["turn"] + 1
            raise TraceError(c["path"], c["line"], "turn", f"turn {missing} of trajectory {c['trajectory']!r} in "
                                                           f"group {c['group']!r} is missing (turns {prev['turn']} "
                                                           f"and {c['turn']} are present); a lost log line?")
        if prev is None:
            derived = c["prompt_tokens"]
        else:
            derived = c["prompt_tokens"] - prev["prompt_tokens"] - prev["completion_tokens"]
        if derived < 0:
            raise TraceError(c["path"], c["line"], "prompt_tokens",
                             f"expected the prompt to extend the previous turn's prompt + completion "
                             f"({prev['prompt_tokens']} + {prev['completion_tokens']}), got {c['prompt_tokens']}")
        if c["new_tokens"] is not None and c["new_tokens"] != derived:
            raise TraceError(c["path"], c["line"], "new_tokens",
                             f"expected {derived} (prompt minus the previous prompt and completion), "
                             f"got {c['new_tokens']}")
        out.append(CallSpec(c["prompt_tokens"], derived, c["completion_tokens"], c["tool_latency_s"],
                            c["cache_salted"]))
        prev = c
    rewards = [c["reward"] for c in calls if c["reward"] is not None]
    return TrajectorySpec(index, tuple(out), rewards[-1] if rewards else 0.0)


def collect(paths, name: str = "collected", seed: int = 0) -> Workload:
    """Read per-call logs (shape (a) or (b), see the module docstring) into a `Workload`."""
    by_group: dict[Any, dict[Any, list[dict]]] = {}
    for p in paths:
        p = Path(p)
        for line, rec in json_lines(p):
            call = normalise_record(p, line, rec)
            by_group.setdefault(str(call["group"]), {}).setdefault(str(call["trajectory"]), []).append(call)
    if not by_group:
        raise TraceError(", ".join(map(str, paths)), 0, None, "no call records found")
    groups, t = [], 0
    base = min(c["turn"] for g in by_group.values() for calls in g.values() for c in calls)
    if base > 1:
        c = min((c for g in by_group.values() for calls in g.values() for c in calls), key=lambda c: c["turn"])
        raise TraceError(c["path"], c["line"], "turn", f"the first turn in the logs is {base}; turns count from 0 "
                                                       f"(or 1), so the earlier turns are missing")
    for gi, gid in enumerate(_order(by_group)):
        trajs = []
        for tid in _order(by_group[gid]):
            trajs.append(_trajectory(t, by_group[gid][tid], base))
            t += 1
        calls = [c for tid in by_group[gid] for c in by_group[gid][tid]]
        firsts = {tr.calls[0].prompt_tokens for tr in trajs}
        given = [c["shared_prompt_tokens"] for c in calls if c["shared_prompt_tokens"] is not None]
        # Samples of one RL prompt share it whole; differing first prompts share nothing we can prove.
        shared = given[-1] if given else (firsts.pop() if len(firsts) == 1 else 0)
        if shared > min(tr.calls[0].prompt_tokens for tr in trajs):
            c = calls[-1]
            raise TraceError(c["path"], c["line"], "shared_prompt_tokens",
                             f"expected at most the group's shortest first prompt, got {shared}")
        groups.append(GroupSpec(gi, shared, tuple(trajs)))
    return build_workload(name, seed, groups, {"source": "collect", "logs": [Path(p).name for p in paths]})
