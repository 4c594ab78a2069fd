"""The measurement contract as pure functions of recorded evidence (bench-contract.md section 3).

Inputs are the plain dicts of ``updates.jsonl`` (k, d_k, c_k, tokens, groups, trajectories,
rank_intervals) and ``turns.jsonl`` (finish, completion_tokens, group, trajectory). Times are
seconds on one monotonic clock; rates are per second unless the name says otherwise.

Headline window H = (c_15, c_20]. Trainer busy time is the length of the union of every
rank's native intervals, so concurrent ranks are not double counted. Trainer rates (trainer
tokens/s, duty, rank skew) are reported only when every update in the window carries native
per-rank intervals (``rank_intervals_native``); otherwise they are None and the window says
``trainer_rates: "not native"``, so a copied or simulated interval never reaches a headline.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from harness.pins import HEADLINE_FIRST, HEADLINE_LAST, TOTAL_UPDATES, WARMUP_UPDATES

Interval = tuple[float, float]


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Union of half-open intervals [s, e): sort by start, merge while s <= current end."""
    out: list[list[float]] = []
    for s, e in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def union_length(intervals: Iterable[Interval]) -> float:
    return sum(e - s for s, e in merge_intervals(intervals))


def update_intervals(update: dict) -> list[Interval]:
    """Every native interval of one update across all ranks."""
    return [tuple(iv) for ivs in update.get("rank_intervals", {}).values() for iv in ivs]


def rank_skew(update: dict) -> float | None:
    """(max_r e - min_r s) - median_r (e_r - s_r), with s_r/e_r a rank's first start and last end."""
    spans = [(min(s for s, _ in ivs), max(e for _, e in ivs))
             for ivs in update.get("rank_intervals", {}).values() if ivs]
    if not spans:
        return None
    whole = max(e for _, e in spans) - min(s for s, _ in spans)
    return whole - statistics.median(e - s for s, e in spans)


def _by_k(updates: list[dict]) -> dict[int, dict]:
    return {int(u["k"]): u for u in updates}


def window_rates(updates: list[dict], turns: list[dict], first: int, last: int) -> dict:
    """Rates over (c_{first-1}, c_last]: updates first..last and turns finishing inside."""
    by_k = _by_k(updates)
    ks = range(first, last + 1)
    if first - 1 not in by_k or any(k not in by_k for k in ks):
        return {"complete": False}
    t0, t1 = float(by_k[first - 1]["c_k"]), float(by_k[last]["c_k"])
    span = t1 - t0
    n = last - first + 1
    if span <= 0:
        return {"complete": False, "window_s": span}
    sel = [by_k[k] for k in ks]
    tokens = sum(int(u["tokens"]) for u in sel)
    groups = sum(int(u["groups"]) for u in sel)
    trajs = sum(int(u["trajectories"]) for u in sel)
    inside = [t for t in turns if t.get("finish") is not None and t0 < float(t["finish"]) <= t1]
    sampled_tokens = sum(int(t["completion_tokens"]) for t in inside)
    native = all(bool(u.get("rank_intervals_native")) for u in sel)
    busy = union_length(iv for u in sel for iv in update_intervals(u))
    skews = [s for s in (rank_skew(u) for u in sel) if s is not None]
    return {
        "complete": True,
        "updates": [first, last],
        "window_s": span,
        "updates_per_hour": n * 3600.0 / span,
        "seconds_per_update": span / n,
        "accepted_trained_tokens": tokens,
        "accepted_trained_tokens_per_s": tokens / span,
        "trained_groups_per_s": groups / span,
        "trained_trajectories_per_s": trajs / span,
        "sampled_tokens": sampled_tokens,
        "sampled_tokens_per_s": sampled_tokens / span,
        "sampled_calls_per_s": len(inside) / span,
        "trainer_rates": "native" if native else "not native",
        "trainer_busy_s": busy if native else None,
        "trainer_tokens_per_s": tokens / busy if native and busy > 0 else None,
        "trainer_duty": busy / span if native else None,
        "rank_skew_max_s": max(skews) if native and skews else None,
        "rank_skew_mean_s": statistics.fmean(skews) if native and skews else None,
    }


def secondary(updates: list[dict], staleness_bound: int) -> dict:
    stale = [int(s) for u in updates for s in u.get("staleness", [])]
    return {
        "staleness_max": max(stale) if stale else None,
        "staleness_mean": statistics.fmean(stale) if stale else None,
        "staleness_violations": sum(1 for s in stale if s > staleness_bound),
        "discarded_stale_groups": sum(int(u.get("discards", {}).get("stale", 0)) for u in updates),
        "discarded_zero_variance_groups": sum(int(u.get("discards", {}).get("zero_variance", 0))
                                             for u in updates),
    }


def results(updates: list[dict], turns: list[dict], staleness_bound: int) -> dict:
    """Headline (updates 16-20), all measured (6-20), per-update busy time and secondary metrics."""
    by_k = _by_k(updates)
    per_update = []
    for k in sorted(by_k):
        u, prev = by_k[k], by_k.get(k - 1)
        native = bool(u.get("rank_intervals_native"))
        per_update.append({"k": k, "e2e_s": float(u["c_k"]) - float(prev["c_k"]) if prev else None,
                           "trainer_busy_s": union_length(update_intervals(u)) if native else None,
                           "rank_skew_s": rank_skew(u) if native else None})
    return {
        "headline": window_rates(updates, turns, HEADLINE_FIRST, HEADLINE_LAST),
        "measured": window_rates(updates, turns, WARMUP_UPDATES + 1, TOTAL_UPDATES),
        "per_update": per_update,
        "secondary": secondary(updates, staleness_bound),
    }
