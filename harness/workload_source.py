"""The benchmark workloads, from the repository's `workloads` package.

The harness never samples lengths itself: `workloads.generate(name, groups, seed, group_size,
**knobs)` draws the whole schedule up front, and `Workload.schedule_sha256()` identifies it.
Validation regenerates the same schedule from the manifest's recorded parameters.
"""

from __future__ import annotations

from typing import Any

from harness.errors import BenchError


def generate(name: str, groups: int, seed: int, group_size: int | None = None, **knobs: Any):
    """The named benchmark workload with ``groups`` prompt groups (a `workloads.Workload`)."""
    try:
        from workloads import generate as _generate  # the generators land in workloads/
    except ImportError as exc:
        raise BenchError("workloads.generate is not available in this checkout; "
                         "the benchmark workload generators are missing") from exc
    try:
        return _generate(name, groups, seed, group_size=group_size, **knobs)
    except (KeyError, ValueError) as exc:
        raise BenchError(f"workload {name!r}: {exc}") from exc


def describe(workload, groups: int, group_size: int | None, knobs: dict) -> dict:
    """The manifest's workload section: everything needed to regenerate and re-hash it."""
    sizes = sorted({workload.group_size(g) for g in range(workload.n_groups)})
    turns = sorted({len(workload.traj_calls(t)) for t in range(workload.n_trajectories)})
    return {
        "name": workload.name,
        "seed": int(workload.seed),
        "groups": groups,
        "group_size": group_size,
        "group_sizes": sizes,
        "calls_per_trajectory": turns,
        "knobs": dict(knobs),
        "generator_knobs": {k: v for k, v in (workload.knobs or {}).items() if _jsonable(v)},
        "schedule_sha256": workload.schedule_sha256(),
        "completion_tokens": int(workload.call_completion_tokens.sum()),
        "cache_salted_calls": int(workload.call_cache_salted.sum()),
        "forced_length_policy": "min_tokens = max_tokens = L, ignore_eos = true, no stop strings",
    }


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | list | dict | type(None))
