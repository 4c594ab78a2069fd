"""A design-space search end to end: expand, check, run, Pareto front, top-k oracle re-check.

`run_sweep(space, ...)` returns a `SweepResult`: one row per point (dropped ones included,
with their reason), the Pareto front over the space's objectives, and the re-check of the
top-k fast-path points on the SimPy engine with the point's own (non-surrogate) costs.
File output is in `simrl_explore.output`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable

import attrs
import numpy as np

from simrl_explore.runner import (
    CompileClock,
    OraclePool,
    check_keys,
    default_jobs,
    oracle_args,
    prepare,
    route,
    run_jobs,
)
from simrl_explore.space import OBJECTIVES, Space

METRIC_COLUMNS = ("status", "reason", "engine", "fallback", "step_time_s", "trained_tokens_per_s",
                  "gpu_hours_per_1k_steps", "staleness_mean", "staleness_max", "binding", "wait_frac", "train_frac",
                  "sync_frac", "makespan_s", "training_steps", "complete", "pareto", "surrogate_rollout_med_err",
                  "surrogate_rollout_prefill_med_err", "surrogate_rollout_max_err", "surrogate_training_med_err",
                  "surrogate_training_max_err", "out_of_domain")


@attrs.define
class SweepResult:
    space: Space
    rows: list[dict]  # one per point, in point order
    recheck: list[dict]
    timings: dict
    engines: Counter
    fallbacks: Counter
    dropped: Counter

    @property
    def columns(self) -> list[str]:
        cols = ["point", *self.space.variable_names]
        extra = [c for c in METRIC_COLUMNS if any(c in r for r in self.rows)]
        return cols + extra

    def ok(self) -> list[dict]:
        return [r for r in self.rows if r.get("status") == "ok"]

    def front(self) -> list[dict]:
        return [r for r in self.rows if r.get("pareto")]

    def ranked(self) -> list[dict]:
        direction, col = OBJECTIVES[self.space.rank_by]
        sign = 1 if direction == "min" else -1
        return sorted(self.ok(), key=lambda r: (sign * r[col], r["point"]))

    def recheck_agrees(self) -> bool:
        return all(r["agrees"] for r in self.recheck)

    def inert_axes(self) -> list[str]:
        """Axes that change no simulated outcome (step time, trained tokens/s, staleness): at every
        setting of the other axes, all their values tie (GPU-hours may still differ by GPU count).

        E.g. ``deployment.rollout.tp`` under the linear cost family (it has no layout), or the ZeRO
        stage under a training model without a memory-dependent time: they may still decide
        feasibility, but the search cannot tell their values apart."""
        names = [a.name for a in self.space.axes]
        cols = ["step_time_s", "trained_tokens_per_s", "staleness_mean"]
        ok = self.ok()
        if not ok or not names:
            return []

        def codes(values) -> np.ndarray:  # equal values (Python ==, as dict keys), equal codes
            seen: dict = {}
            return np.fromiter((seen.setdefault(v, len(seen)) for v in values), np.int64, len(ok))

        axis = np.stack([codes([r.get(n) for r in ok]) for n in names], axis=1)  # [rows, axes]
        outcome = codes([tuple(round(float(r[c]), 9) for c in cols) for r in ok])
        out = []
        for i, a in enumerate(names):
            # rows grouped by the other axes' values; within a group, the last row of each value of
            # `a` counts (as a dict of value -> outcome keeps it)
            group = np.zeros(len(ok), np.int64)
            for j in range(len(names)):  # one code per combination of the other axes' codes
                if j != i:
                    pair = group * (int(axis[:, j].max()) + 1) + axis[:, j]
                    group = np.unique(pair, return_inverse=True)[1].reshape(-1)
            cell = group * (int(axis[:, i].max()) + 1) + axis[:, i]
            _, last_rev = np.unique(cell[::-1], return_index=True)
            keep = len(ok) - 1 - last_rev
            g, res = group[keep], outcome[keep]
            n_vals = np.bincount(g)  # distinct values of `a` per group (one kept row each)
            n_res = np.bincount(np.unique(np.stack([g, res], axis=1), axis=0)[:, 0])
            compared = n_vals > 1
            if compared.any() and np.all(n_res[compared] == 1):
                out.append(a)
        return out


def pareto_mask(values: np.ndarray) -> np.ndarray:
    """Non-dominated rows of ``values`` (all objectives to minimise; equal rows do not dominate).

    Rows in lexicographic order: whatever dominates a row sorts before it, and whatever dominates
    a dominated row dominates the row too, so each row is compared with the front found so far
    (O(n x front) instead of O(n^2))."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    order = np.lexsort(values.T[::-1])
    front = np.empty((0, values.shape[1]))
    for i in order:
        v = values[i]
        if not np.any(np.all(front <= v, axis=1) & np.any(front < v, axis=1)):
            keep[i] = True
            front = np.vstack([front, v])
    return keep


def mark_pareto(rows: list[dict], objectives: tuple[str, ...]) -> None:
    ok = [r for r in rows if r.get("status") == "ok" and all(math.isfinite(r[OBJECTIVES[o][1]]) for o in objectives)]
    for r in rows:
        if r.get("status") == "ok":
            r["pareto"] = False
    if not ok:
        return
    vals = np.array([[(1 if OBJECTIVES[o][0] == "min" else -1) * r[OBJECTIVES[o][1]] for o in objectives] for r in ok])
    for r, k in zip(ok, pareto_mask(vals), strict=True):
        r["pareto"] = bool(k)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def recheck(space: Space, result_rows: list[dict], jobs_by_point: dict, n_jobs: int,
            tick: Callable[[int], None] = lambda k: None) -> list[dict]:
    """Re-simulate the top-k fast-path points on SimPy with their own costs; compare."""
    direction, col = OBJECTIVES[space.rank_by]
    sign = 1 if direction == "min" else -1
    fast_ok = [r for r in result_rows if r.get("status") == "ok" and r.get("engine") == "fast"]
    top = sorted(fast_ok, key=lambda r: (sign * r[col], r["point"]))[: space.top_k]
    if not top:
        return []
    out: dict[int, dict] = {}
    with OraclePool(min(n_jobs, len(top))) as pool:
        def cb_for(r):
            def cb(o):
                out[r["point"]] = o
                tick(1)
            return cb
        pending = [pool.submit(oracle_args(space, jobs_by_point[r["point"]]), cb_for(r)) for r in top]
        for p in pending:
            p.get()
    checks = []
    for rank, r in enumerate(top, 1):
        o = out[r["point"]]
        if o.get("status") == "failed":
            checks.append({"rank": rank, "point": r["point"], "agrees": False, "reason": o["reason"]})
            continue
        e_step = _rel(r["step_time_s"], o["step_time_s"])
        e_tok = _rel(r["trained_tokens_per_s"], o["trained_tokens_per_s"])
        agrees = e_step <= space.recheck_tolerance and e_tok <= space.recheck_tolerance and r["binding"] == o["binding"]
        checks.append({"rank": rank, "point": r["point"], "fast_step_time_s": r["step_time_s"],
                       "simpy_step_time_s": o["step_time_s"], "step_time_rel_err": e_step,
                       "fast_trained_tokens_per_s": r["trained_tokens_per_s"],
                       "simpy_trained_tokens_per_s": o["trained_tokens_per_s"], "tokens_rel_err": e_tok,
                       "fast_binding": r["binding"], "simpy_binding": o["binding"],
                       "simpy_staleness_mean": o["staleness_mean"], "agrees": bool(agrees)})
    # Does the oracle keep the fast path's order of the top-k?
    done = [c["point"] for c in checks if "simpy_step_time_s" in c]
    order = sorted(done, key=lambda pt: (sign * out[pt][col], pt))
    for c in checks:
        c["simpy_rank"] = order.index(c["point"]) + 1 if c["point"] in order else None
    return checks


def run_sweep(space: Space, jobs: int | None = None, chunk: int = 1000, ray_address: str | None = None,
              engine: str | None = None, progress: Callable[[str, int], Callable[[int], None]] | None = None,
              limit: int | None = None) -> SweepResult:
    """Run every point of ``space``. ``progress(label, total)`` returns a tick(k) callback."""
    progress = progress or (lambda label, total: (lambda k: None))
    n_jobs = jobs or default_jobs()
    t0 = time.perf_counter()
    check_keys(space)
    points = space.points()
    if limit is not None:
        points = points[:limit]
    job_list, workloads, cache = prepare(space, points)
    t1 = time.perf_counter()
    fast, oracle = route(space, job_list, workloads, cache, engine)
    t2 = time.perf_counter()
    runnable = sum(len(v) for v in fast.values()) + len(oracle)
    clock = CompileClock()
    if fast:  # (a SimPy-only sweep does not import jax)
        with clock:
            run_jobs(space, fast, oracle, n_jobs, chunk, ray_address, progress("simulating", runnable))
    else:
        run_jobs(space, fast, oracle, n_jobs, chunk, ray_address, progress("simulating", runnable))
    t3 = time.perf_counter()
    rows = []
    for j in job_list:
        row = {"point": j.point.index, **j.point.variables, **j.row}
        rows.append(row)
    mark_pareto(rows, space.objectives)
    by_point = {j.point.index: j for j in job_list}
    top_n = min(space.top_k, sum(1 for r in rows if r.get("engine") == "fast" and r.get("status") == "ok"))
    checks = recheck(space, rows, by_point, n_jobs, progress("oracle re-check", top_n)) if top_n else []
    t4 = time.perf_counter()
    # setup_s = prepare_s (configurations, workloads, feasibility checks) + route_s (surrogate fits,
    # lowering); simulate_s includes compile_s (jax tracing + compiling or loading from the cache)
    timings = {"points": len(points), "simulated": runnable, "prepare_s": t1 - t0, "route_s": t2 - t1,
               "setup_s": t2 - t0, "compile_s": clock.seconds, "simulate_s": t3 - t2, "recheck_s": t4 - t3,
               "total_s": t4 - t0, "points_per_s": runnable / max(t3 - t2, 1e-9), "jobs": n_jobs, "chunk": chunk}
    return SweepResult(
        space=space, rows=rows, recheck=checks, timings=timings,
        engines=Counter(r["engine"] for r in rows if r.get("engine")),
        fallbacks=Counter(r["fallback"] for r in rows if r.get("fallback")),
        dropped=Counter(_reason_kind(r["reason"]) for r in rows if r.get("status") == "dropped"),
    )


def _reason_kind(reason: str) -> str:
    """Group drop reasons: numbers become N ('memory: training peak N GiB per GPU > N GiB ...')."""
    import re

    text = re.sub(r"\d+(\.\d+)?", "N", reason)
    return text if len(text) <= 100 else text[:97] + "..."
