"""The sweep driver behind `srl-sweep`: expand a grid, run every configuration, one row each.

`expand_grid` turns ``KEY=V1,V2`` axes into the cartesian product of override lists;
`run_sweep` runs them on the fast engine (batched in chunks, configurations sharing a workload
run together; optionally sharded over a Ray cluster) or on SimPy one by one, and returns one
row per configuration in grid order. Rows hold the grid values, makespan, mean step time,
trained tokens/s, staleness mean and max, steps done and the engine used. numpy-only until
the fast engine is actually used; no file I/O (see `write_rows`).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import tempfile
from collections.abc import Callable

import numpy as np

from simrl.config import load_config, unstructure
from simrl.cost.build import build_costs

METRICS = ("makespan_s", "step_time_mean_s", "trained_tokens_per_s", "staleness_mean", "staleness_max",
           "training_steps", "complete", "engine")


def expand_grid(base: list[str], grid: list[str]) -> list[list[str]]:
    """Cartesian product of ``KEY=V1,V2,...`` axes, each combination appended to ``base``."""
    axes = []
    for g in grid:
        key, sep, values = g.partition("=")
        if not sep or not key.strip() or not values:
            raise ValueError(f"--grid {g!r}: expected KEY=V1,V2,... e.g. deployment.rollout.instances=1,2,4")
        axes.append([f"{key.strip()}={v.strip()}" for v in values.split(",")])
    return [list(base) + list(combo) for combo in itertools.product(*axes)]


def grid_keys(grid: list[str]) -> list[str]:
    return [g.partition("=")[0].strip() for g in grid]


def _workload_key(cfg) -> str:
    return json.dumps([unstructure(cfg)["workload"], cfg.run.seed], sort_keys=True, default=str)


#: grid keys whose value lands in exactly one lowered `Params` field, written there directly (the
#: configuration is not re-parsed or re-lowered per grid point), as long as no other grid axis
#: starts with one of the listed prefixes (keys those values could interact with)
DIRECT = {
    "deployment.rollout.max_num_seqs": ("max_seqs", ("cost.", "deployment.")),
    "run.training_steps": ("steps", ("run.",)),
    "router.name": ("router", ("router.",)),
}


def run_sweep(config_path: str | None, combos: list[list[str]], engine: str = "fast", fallback: str = "error",
              chunk: int = 128, ray_address: str | None = None,
              progress: Callable[[int], None] | None = None) -> list[dict]:
    """Run every override list in ``combos``; rows in the same order. ``engine``: fast | simpy.

    With ``fallback='simpy'`` configurations outside the fast path's feature set run on SimPy;
    with ``'error'`` the first one raises `FastPathUnsupported` naming it. On the fast engine,
    grid axes in `DIRECT` are lowered once per value and written into the lowered parameters of
    each combination of the other axes (`direct_columns`), so a grid over them parses and lowers
    one configuration per combination of the remaining axes, not one per grid point.
    """
    from simrl.engine.sim import load_workload

    direct = direct_columns(config_path, combos) if engine == "fast" else {}
    rows: list[dict | None] = [None] * len(combos)
    tick = progress or (lambda k: None)
    workloads: dict[str, object] = {}
    lowered_wl: dict[str, object] = {}
    fast_groups: dict[str, list[tuple[int, object, object]]] = {}
    reduced: dict[tuple, tuple] = {}  # combination of the other axes -> (cfg, key, lowered or exception)
    cfgs = {} if direct else {m: load_config(config_path, c) for m, c in enumerate(combos)}
    for m, combo in enumerate(combos):
        rest = tuple(v for j, v in enumerate(combo) if j not in direct)
        if rest not in reduced:
            cfg = cfgs[m] if not direct else load_config(config_path, list(rest))
            key = _workload_key(cfg)
            if key not in workloads:
                workloads[key] = load_workload(cfg)
            lowered: object = None
            if engine == "fast":
                from simrl_fast.lowering import FastPathUnsupported, lower, lower_workload

                try:
                    if key not in lowered_wl:
                        lowered_wl[key] = lower_workload(workloads[key])
                    lowered = lower(cfg, workloads[key], build_costs(cfg), wa=lowered_wl[key])
                except FastPathUnsupported as exc:
                    lowered = exc
            reduced[rest] = (cfg, key, lowered)
            if not direct:
                reduced = {rest: reduced[rest]}  # nothing is shared between grid points: keep one
        cfg, key, lowered = reduced[rest]
        if engine == "fast" and not isinstance(lowered, Exception):
            params = lowered[1]._replace(**{f: vals[combo[j]] for j, (f, vals) in direct.items()})
            fast_groups.setdefault(key, []).append((m, params, lowered[2]))
            continue
        if engine == "fast" and fallback != "simpy":
            raise type(lowered)(f"configuration {' '.join(combos[m])}: {lowered}") from None
        full = cfgs.get(m) or load_config(config_path, combo)
        rows[m] = _simpy_row(full, workloads[key], build_costs(full))
        tick(1)
    for items in fast_groups.values():
        for (m, _, _), summary in zip(items, _run_fast(items, chunk, ray_address, tick), strict=True):
            rows[m] = {**summary, "engine": "fast"}
    return [{**_grid_values(c), **{k: r[k] for k in METRICS}} for c, r in zip(combos, rows, strict=True)]


def direct_columns(config_path: str | None, combos: list[list[str]]) -> dict[int, tuple[str, dict]]:
    """Grid columns whose values are written straight into the lowered parameters.

    Returns {column: (Params field, {override: lowered value})}. A column qualifies when every
    combination has the same keys in the same order, its key is in `DIRECT`, appears once, no
    other varying column has a key it may interact with, and lowering the first combination with
    each of its values changes that one field only (values the config or the lowering rejects
    disqualify it: the per-combination path then reports them).
    """
    from simrl.engine.sim import load_workload
    from simrl_fast.lowering import lower

    if len(combos) < 2 or len({len(c) for c in combos}) != 1:
        return {}
    keys = [o.partition("=")[0].strip() for o in combos[0]]
    if any([o.partition("=")[0].strip() for o in c] != keys for c in combos):
        return {}
    varying = [j for j in range(len(keys)) if len({c[j] for c in combos}) > 1]
    cand = [j for j in varying if keys[j] in DIRECT and keys.count(keys[j]) == 1
            and not any(k != keys[j] and k.startswith(DIRECT[keys[j]][1]) for k in (keys[i] for i in varying))]
    if not cand:
        return {}
    out: dict[int, tuple[str, dict]] = {}
    first = combos[0]
    try:
        base_rest = [v for j, v in enumerate(first) if j not in cand]
        cfg = load_config(config_path, base_rest)
        workload = load_workload(cfg)
        _, p0, _ = lower(cfg, workload, build_costs(cfg))
    except Exception:  # the per-combination path reports it, with the combination named
        return {}
    for j in cand:
        field = DIRECT[keys[j]][0]
        vals = {}
        try:
            for v in sorted({c[j] for c in combos}):
                c = load_config(config_path, [*base_rest, v])
                _, p, _ = lower(c, workload, build_costs(c))
                changed = [f for f in p._fields if np.asarray(getattr(p, f)) != np.asarray(getattr(p0, f))]
                if changed not in ([], [field]):
                    raise ValueError(changed)
                vals[v] = getattr(p, field)
        except Exception:
            continue
        out[j] = (field, vals)
    return out


def _grid_values(overrides: list[str]) -> dict:
    return dict(o.split("=", 1) for o in overrides)


def _simpy_row(cfg, workload, costs) -> dict:
    from simrl.engine.sim import simulate

    t = simulate(cfg, workload, costs).totals
    row = {k: t[k] for k in METRICS[:-2]}
    return {**row, "complete": t["training_steps"] >= cfg.run.training_steps, "engine": "simpy"}


def _run_fast(items, chunk: int, ray_address: str | None, tick) -> list[dict]:
    """Summaries of lowered configurations sharing a workload: one Static (one compile) for every
    chunk; the last chunk is padded to the chunk size by `run_params`."""
    from simrl_fast.lowering import static_for

    params = [p for _, p, _ in items]
    wa = items[0][2]
    static = static_for(params, wa)
    if ray_address:
        try:
            import ray
        except ImportError:
            raise RuntimeError("--ray needs the ray package (pip install 'simrl[ray]'); it is not installed") from None
        size = min(chunk, len(params))
        chunks = [params[i:i + size] for i in range(0, len(params), size)]
        ray.init(address=ray_address, ignore_reinit_error=True)
        task = ray.remote(_fast_chunk)
        futures = [task.remote(c, wa, static, size) for c in chunks]
        out = []
        for c, f in zip(chunks, futures, strict=True):
            out.extend(ray.get(f))
            tick(len(c))
        return out
    return _fast_chunk(params, wa, static, min(chunk, len(params)), tick)


def _fast_chunk(params, wa, static, chunk: int, tick=None) -> list[dict]:
    from simrl_fast.engine import run_params

    real = len(params)
    padded = params + [params[0]] * max(chunk - real, 0)  # a shorter Ray chunk: the same batch size
    res = run_params(padded, wa, chunk=chunk, static=static, on_chunk=tick)
    return [res.summary(m) for m in range(real)]


def render_rows(rows: list[dict], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=1, sort_keys=False) + "\n"
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_rows(path: str, rows: list[dict]) -> None:
    """Write CSV (or JSON for *.json) atomically: a temporary file in the same folder, then rename."""
    text = render_rows(rows, "json" if path.endswith(".json") else "csv")
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".sweep-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
