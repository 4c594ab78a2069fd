"""Run a search space: feasibility, engine choice, the fast path in batches, the SimPy oracle in parallel.

For every point: build its configuration (`simrl.config.load_config`; a `ConfigError` drops
the point with the message), run the feasibility checks (`simrl_explore.checks`), then choose
the engine:

- ``engine: fast``: the fast path must take it (else an error naming the point and feature);
- ``engine: simpy``: the SimPy engine (the oracle);
- ``engine: auto`` (default): the fast path when `simrl_fast.lowering.lower` accepts the point
  (with `surrogate: linear`, non-linear costs are first linearised, `simrl_explore.surrogate`),
  else the oracle; the reason is recorded per point (column ``fallback``).

Fast-path points run in batches of equal size (one `Static` per workload, so one compile per
batch size; the last batch is padded), in this process or sharded over a Ray cluster. Oracle points run in
a process pool started with the *spawn* method (never fork after JAX is loaded), one process
per core by default, concurrently with the fast batches. Each row holds the point's variables,
status (``ok`` / ``dropped`` / ``failed``), reason, engine and `simrl_explore.metrics`.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import warnings
from collections.abc import Callable
from typing import Any

import attrs

from simrl.config import ConfigBase, ConfigError, converter, load_config, unstructure
from simrl_explore.checks import LayoutCache, run_checks
from simrl_explore.metrics import fast_metrics, report_metrics
from simrl_explore.space import Point, Space


class SweepError(RuntimeError):
    """A sweep that cannot run as asked (e.g. engine=fast and a point the fast path rejects)."""


@attrs.define
class Job:
    point: Point
    cfg: Any = None
    workload_key: str = ""
    gpus: int = 0
    row: dict = attrs.field(factory=dict)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {'; '.join(lines[1:3])}"
    return lines[0] if lines else type(exc).__name__


def _workload_key(cfg) -> str:
    # converter.unstructure(cfg.workload) is unstructure(cfg)["workload"], without the rest
    return json.dumps([converter.unstructure(cfg.workload), cfg.run.seed], sort_keys=True, default=str)


def check_keys(space: Space) -> None:
    """Every axis / derived key must name a configuration key (knob dicts accept any name)."""
    from simrl.strictio import did_you_mean
    from simrl_explore.space import SpaceError

    try:
        base_cfg = load_config(space.base_config, list(space.base_set))
    except ConfigError as exc:
        raise SpaceError(f"{space.path or '<space>'}: base: {exc}") from None
    data = unstructure(base_cfg)
    swept = {a.key for a in space.axes if a.key} | {d.key for d in space.derived if d.key}
    for key in sorted(swept):
        if key == "policy" or (key.startswith("policy.") and "policy" in swept):
            continue
        node: Any = data
        parts = key.split(".")
        for i, p in enumerate(parts):
            if isinstance(node, dict) and i > 0 and parts[i - 1].endswith("knobs"):
                break
            if not isinstance(node, dict) or p not in node:
                hint = did_you_mean(p, [str(k) for k in node]) if isinstance(node, dict) else ""
                raise SpaceError(f"{space.path or '<space>'}: {key!r} is not a configuration key "
                                 f"({'.'.join(parts[:i + 1])} not found{hint}; `srl config` prints them all)")
            node = node[p]
    check_axis_types(space, base_cfg, swept)


def check_axis_types(space: Space, base_cfg: Any, swept: set[str]) -> None:
    """Every value an axis gives its configuration key has that key's type (`override_value_error`):
    a grid value of the wrong type (``"two"`` for an integer, ``1.5`` for a count), or a random /
    LHS axis drawing floats for an integer key, is the space file's error before anything runs, not
    every point dropped. Ranges and cross-key rules stay per point (a point may legitimately fall
    out). Keys under ``policy`` are typed by the base's policy kind unless ``policy`` is swept."""
    from simrl.config import override_value_error
    from simrl_explore.space import SpaceError, _scale, _yaml_value

    where = space.path or "<space>"
    for a in space.axes:
        if not a.key or (a.key.startswith("policy.") and "policy" in swept):
            continue
        if a.kind == "grid":
            cases = [(f"{a.at}.grid[{j}]" if a.at else a.name, v) for j, v in enumerate(a.values)]
        else:  # the two ends of the draw (integer: false draws floats)
            cases = [(f"{a.at}.{a.kind}.{end}" if a.at else a.name, _scale(a, u)) for end, u in (("low", 0.0),
                                                                                                   ("high", 1.0))]
        for at, v in cases:
            why = override_value_error(base_cfg, a.key, _yaml_value(v))
            if why is None:
                continue
            hint = ""
            if a.kind != "grid" and not a.integer and "expected an integer" in why:
                hint = "; add integer: true to draw whole numbers"
            loc = f"{where}: {at}" if space.path else f"--grid {a.key}"  # (grid mode: the command line)
            raise SpaceError(f"{loc}: value {v!r} for {a.key}: {why}{hint} (axis {a.name!r}; every "
                             f"value of an axis must be a valid value of its key, checked before any point runs)")


_COST_KNOBS = ("rollout_knobs", "training_knobs", "weight_sync_knobs", "colocated_knobs")


def _knob_override(ov: str) -> tuple[str, str, str] | None:
    """(section, name, raw value) of a ``cost.<section>_knobs.NAME=VALUE`` override, else None."""
    key, eq, raw = ov.partition("=")
    parts = key.strip().split(".")
    if eq and len(parts) == 3 and parts[0] == "cost" and parts[1] in _COST_KNOBS and parts[2]:
        return parts[1], parts[2], raw
    return None


class PointLoader:
    """``load(overrides)`` of a sweep's points, with each distinct combination of the points'
    non-knob overrides loaded (parsed, structured, checked) once.

    A point's cost-knob overrides (``cost.rollout_knobs.a=0.005``: the cost families' free-form
    constructor arguments, `CostConfig`) are then set on a copy of that configuration's
    `CostConfig`, each value read as `load_config` reads it (`simrl.config._parse_value`) and
    checked as it checks knobs (plain and finite, `_plain_error`); nothing else reads them while
    loading (`check_deployment` checks the deployment, not the costs). The result equals
    ``load(overrides)`` (tests/explore/test_sweep_setup.py); where anything is off (a knob key
    another override also sets, a value that does not parse or check, a skeleton that does not
    load) the point is loaded whole by ``load``, so its error message is the one it always was.
    Points of one skeleton share its frozen sections (deployment, policy, workload, run); each
    gets its own `CostConfig` and knob dicts."""

    def __init__(self, load: Callable[[list[str]], Any]):
        self.load = load
        self.skeletons: dict[tuple[str, ...], Any] = {}

    def __call__(self, overrides: list[str]) -> Any:
        from simrl.config import _parse_value, _plain_error

        knobs, rest = [], []
        for ov in overrides:
            k = _knob_override(ov)
            (rest if k is None else knobs).append(ov if k is None else k)
        if not knobs:
            return self.load(overrides)
        rest_keys = [ov.partition("=")[0].strip() for ov in rest]
        if any(k == "cost" or any(k == f"cost.{sec}" or k.startswith(f"cost.{sec}.")
                                              for sec, _, _ in knobs) for k in rest_keys):
            return self.load(overrides)
        key = tuple(rest)
        cfg0 = self.skeletons.get(key)
        if cfg0 is None:
            try:
                cfg0 = self.skeletons[key] = self.load(rest)
            except ConfigError:
                return self.load(overrides)
        sections: dict[str, dict] = {}
        try:
            for sec, name, raw in knobs:
                d = sections.get(sec)
                if d is None:
                    d = sections[sec] = dict(getattr(cfg0.cost, sec))
                d[name] = _parse_value(f"cost.{sec}.{name}", raw)
        except ConfigError:
            return self.load(overrides)
        if any(_plain_error(d) is not None for d in sections.values()):
            return self.load(overrides)
        return attrs.evolve(cfg0, cost=attrs.evolve(cfg0.cost, **sections))


def prepare(space: Space, points: list[Point]) -> tuple[list[Job], dict[str, Any], LayoutCache]:
    """Configurations, workloads and feasibility of every point (no simulation)."""
    from simrl.engine.core import SimulationError
    from simrl.engine.sim import load_workload
    from simrl_explore.space import SpaceError

    cache = LayoutCache()
    workloads: dict[str, Any] = {}
    jobs = []
    try:  # the base file and set parsed and applied once (load_config per point where it is invalid)
        base = ConfigBase(space.base_config, list(space.base_set))
        load = PointLoader(base.load)
    except ConfigError:
        def load(more):
            return load_config(space.base_config, [*space.base_set, *more])
    keys: dict[int, tuple[Any, str, Any]] = {}  # id(cfg.workload) -> (the object, kept alive; key; seed)
    for pt in points:
        job = Job(pt)
        jobs.append(job)
        if pt.dropped:
            job.row = {"status": "dropped", "reason": pt.dropped}
            continue
        try:
            cfg = load([*pt.overrides, "run.telemetry=false", "run.plots=false"])
        except ConfigError as exc:
            job.row = {"status": "dropped", "reason": f"config: {_first_line(exc)}"}
            continue
        hit = keys.get(id(cfg.workload))  # points loaded from one skeleton share its workload section
        if hit is None or hit[0] is not cfg.workload or hit[2] != cfg.run.seed:
            hit = keys[id(cfg.workload)] = (cfg.workload, _workload_key(cfg), cfg.run.seed)
        key = hit[1]
        if key not in workloads:
            try:
                workloads[key] = load_workload(cfg)
            except SimulationError as exc:  # a generator's knob out of range, a trace that does not load
                if not any(o.startswith("workload.") for o in pt.overrides):  # the base's own workload
                    raise SpaceError(f"{space.path or '<space>'}: base: {exc}") from None
                job.row = {"status": "dropped", "reason": _first_line(exc)}
                continue
        why = run_checks(cfg, workloads[key], space.checks, cache)
        if why:
            job.row = {"status": "dropped", "reason": why}
            continue
        job.cfg, job.workload_key = cfg, key
        job.gpus = cfg.deployment.rollout.gpus + cfg.deployment.training.gpus
    return jobs, workloads, cache


def route(space: Space, jobs: list[Job], workloads: dict, cache: LayoutCache, engine: str | None = None,
          lowering: str = "auto"):
    """Split runnable jobs into fast-path items and oracle jobs (auto: by what the fast path takes).

    The workload is lowered once per workload (`lower_workload`, ~6 ms: it was most of a point's
    lowering). ``lowering="auto"`` (default) or ``"grid"``: the points sharing a workload, one cost object (layout
    and, with a surrogate, the same fitted coefficients) and the same swept keys are lowered
    together by `simrl_fast.grid.lower_grid` from the configurations `prepare` built (no
    configuration is parsed again): each distinct combination of the swept keys it does not write
    directly is lowered once, the direct ones (`grid.DIRECT`, e.g. max_num_seqs) are written into
    the stacked arrays. A group it refuses (e.g. one point over the KV capacity, a rejected
    feature) is lowered point by point, so every point's engine and fallback reason (the feature,
    by name) are the same either way (tests/explore/test_sweep_lowering.py). ``"auto"`` lowers a
    group by the grid only where that takes fewer `lower` calls than its points (a group of one
    point, or one whose every point is a distinct combination, goes point by point: the grid's
    fixed cost per call is ~4 ms).
    Before that, points that differ only in their cost knobs (one skeleton of `PointLoader`: e.g.
    cost coefficients drawn per point, each point its own cost objects, so groups of one) are
    lowered two per skeleton as above and the others by `simrl_fast.grid.lower_like` from the
    first (its cost checks and cost fields; the rest of the row copied), after checking that
    `lower_like` gives the second point's row byte for byte (else the skeleton's points are lowered
    in full); a point `lower_like` refuses is lowered in full, for `lower`'s message.
    ``lowering="point"``: every point by `lower(..., wa=wa)` (~0.06 ms a point on this 2-core machine).
    """
    engine = engine or space.engine
    fast: dict[str, list[tuple[Job, Any, Any]]] = {}
    oracle: list[Job] = []
    if engine == "simpy":
        return fast, [j for j in jobs if j.cfg is not None]
    from simrl_explore.surrogate import Surrogates
    from simrl_fast.grid import lower_like, same_params
    from simrl_fast.lowering import FastPathUnsupported, lower, lower_workload

    surrogates = Surrogates()
    was: dict[str, Any] = {}  # the workload lowered once per workload (most of a point's lowering)
    groups: dict[tuple, tuple[Any, list[tuple[Job, dict]]]] = {}
    lowered: dict[int, Any] = {}  # point index -> Params, or the FastPathUnsupported raised
    # points that differ only in cost knobs (`PointLoader` shares the other sections): the first two
    # of each such skeleton are lowered as any point, the others by `grid.lower_like` from the first
    skeletons: dict[tuple, list[tuple[Job, Any]]] = {}
    derived: list[tuple[Job, Any, dict, list]] = []

    def fallback(job: Job, exc: FastPathUnsupported) -> None:
        if engine == "fast":
            raise SweepError(f"point {job.point.index} ({' '.join(job.point.overrides)}): {exc}") from None
        job.row["fallback"] = str(exc)

    for job in jobs:
        if job.cfg is None:
            continue
        costs = cache.costs(job.cfg)
        w = workloads[job.workload_key]
        info: dict = {}
        try:
            if space.surrogate == "linear":
                costs, info = surrogates.linearise(job.cfg, w, costs, job.workload_key)
            if job.workload_key not in was:
                was[job.workload_key] = lower_workload(w)
        except FastPathUnsupported as exc:
            lowered[job.point.index] = exc
            continue
        if lowering != "point":  # points of one skeleton: two lowered in full, the others like them
            c = job.cfg
            skey = (job.workload_key, id(c.deployment), id(c.policy), id(c.router), id(c.run), id(c.workload),
                    c.cost.rollout, c.cost.training, c.cost.weight_sync, c.cost.offload_bytes_per_s, c.cost.strict)
            sk = skeletons.setdefault(skey, [])
            if len(sk) >= 2:
                derived.append((job, costs, info, sk))
                continue
            sk.append((job, costs))
        keys = tuple(ov.partition("=")[0] for ov in job.point.overrides)
        gkey = (job.workload_key, id(costs.rollout), id(costs.training), id(costs.weight_sync), keys)
        groups.setdefault(gkey, (costs, []))[1].append((job, info))

    for (wkey, *_), (costs, members) in groups.items():
        w, wa = workloads[wkey], was[wkey]
        # a group of one point (e.g. cost coefficients swept per point) is lowered by `lower`: the same
        # rows, without the grid's fixed cost per call (~4 ms)
        grid = lowering != "point" and len(members) > 1
        rows = _lower_group(space, w, costs, wa, [j for j, _ in members], lowering == "grid") if grid else None
        for i, (job, _) in enumerate(members):
            if rows is not None:
                lowered[job.point.index] = rows[i]
                continue
            try:
                lowered[job.point.index] = lower(job.cfg, w, costs, wa=wa)[1]
            except FastPathUnsupported as exc:
                lowered[job.point.index] = exc
        for job, info in members:
            if not isinstance(lowered[job.point.index], FastPathUnsupported):
                job.row.update(info)

    agree: dict[int, bool] = {}  # id(skeleton) -> its second point's full lowering == lower_like's
    for job, costs, info, sk in derived:
        (first, _), (second, costs2) = sk
        w, wa = workloads[job.workload_key], was[job.workload_key]
        row, row2 = lowered[first.point.index], lowered[second.point.index]
        if id(sk) not in agree:
            try:
                agree[id(sk)] = (not isinstance(row, FastPathUnsupported) and not isinstance(row2, FastPathUnsupported)
                                 and same_params(lower_like(row, second.cfg, w, costs2, wa), row2))
            except FastPathUnsupported:
                agree[id(sk)] = False
        try:
            lowered[job.point.index] = (lower_like(row, job.cfg, w, costs, wa) if agree[id(sk)]
                                        else lower(job.cfg, w, costs, wa=wa)[1])
        except FastPathUnsupported:  # lowered in full: the message `lower` gives
            try:
                lowered[job.point.index] = lower(job.cfg, w, costs, wa=wa)[1]
            except FastPathUnsupported as exc:
                lowered[job.point.index] = exc
        if not isinstance(lowered[job.point.index], FastPathUnsupported):
            job.row.update(info)

    for job in jobs:  # in point order, as the per-point path fills them
        if job.cfg is None:
            continue
        got = lowered[job.point.index]
        if isinstance(got, FastPathUnsupported):
            fallback(job, got)
            oracle.append(job)
            continue
        fast.setdefault(job.workload_key, []).append((job, got, was[job.workload_key]))
    return fast, oracle


def _lower_group(space: Space, workload, costs, wa, group: list[Job], always: bool = False) -> list | None:
    """Params rows of ``group`` by one `lower_grid` call, or None where it refuses the group (or,
    unless ``always``, where it would not lower fewer times than there are points)."""
    from simrl_fast.grid import DIRECT, lower_grid, unstack
    from simrl_fast.lowering import FastPathUnsupported

    columns: dict[str, list[str]] = {}
    for job in group:
        for ov in job.point.overrides:
            k, _, v = ov.partition("=")
            columns.setdefault(k, []).append(v)
    # lower_grid lowers once per distinct value of a direct key and once per distinct combination
    # of the others: where that is not fewer than the points, point by point is the cheaper way
    grouped = [columns[k] for k in columns if k not in DIRECT]
    lowers = (sum(len(set(columns[k])) for k in columns if k in DIRECT)
              + (len(set(zip(*grouped, strict=True))) if grouped else 1))
    if lowers >= len(group) and not always:
        return None
    try:
        _, params, _ = lower_grid(workload, costs, columns, base=[*space.base_set, "run.telemetry=false",
                                                                 "run.plots=false"],
                                  config_path=space.base_config, wa=wa, configs=[j.cfg for j in group],
                                  with_static=False)
    except (FastPathUnsupported, ConfigError, ValueError):
        return None
    return unstack(params)


# -- the oracle pool -------------------------------------------------------------------------------

def oracle_task(args: tuple[str | None, list[str], int]) -> dict:
    """Run one configuration on the SimPy engine (in a spawned worker) and return its metrics."""
    config_path, overrides, gpus = args
    from simrl.cost.base import CostModelError, OutOfDomainError
    from simrl.engine.core import SimulationError
    from simrl.engine.sim import simulate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cfg = load_config(config_path, overrides)
            report = simulate(cfg)
        except (ConfigError, SimulationError, CostModelError, OutOfDomainError) as exc:
            return {"status": "failed", "reason": f"simpy: {_first_line(exc)}"}
    row = report_metrics(report, cfg)
    row["out_of_domain"] = int(sum(w.get("count", 0) for w in report.domain_warnings))
    if report.diagnosis:
        row["status"], row["reason"] = "failed", f"simpy: {report.diagnosis.splitlines()[0]}"
    return row


def oracle_args(space: Space, job: Job) -> tuple[str | None, list[str], int]:
    return (space.base_config, [*space.base_set, *job.point.overrides, "run.telemetry=false", "run.plots=false"],
            job.gpus)


class OraclePool:
    """A spawn-method process pool for SimPy runs; results arrive through callbacks."""

    def __init__(self, jobs: int):
        self.n = max(1, jobs)
        self.pool = None

    def __enter__(self):
        self.pool = mp.get_context("spawn").Pool(self.n)
        return self

    def submit(self, args, callback: Callable[[dict], None]):
        return self.pool.apply_async(oracle_task, (args,), callback=callback)

    def __exit__(self, *exc):
        self.pool.close() if exc[0] is None else self.pool.terminate()
        self.pool.join()
        return False


# -- the fast path -----------------------------------------------------------------------------------

def _fast_batch(static, params, wa) -> Any:
    """One batch on a Ray worker (grown on overflow, with the engine's progress guard)."""
    from simrl_fast.engine import run_params

    return run_params(params, wa, static=static, sort=False)


def run_fast(items: list[tuple[Job, Any, Any]], chunk: int, ray_address: str | None,
             tick: Callable[[int], None]) -> None:
    """Run fast-path items sharing one workload; fill each job's row.

    In this process: `simrl_fast.engine.run_params` (points sorted by expected work, ``ceil(n /
    chunk)`` batches of equal size with one Static, so one compile; each batch split over all
    local devices). With ``ray_address``: the same batches, in the same order, one Ray task each."""
    from simrl_fast.engine import batch_size, run_params, work_order
    from simrl_fast.lowering import stack_params, static_for

    params = [p for _, p, _ in items]
    wa = items[0][2]
    if not ray_address:
        res = run_params(params, wa, chunk=chunk, on_chunk=tick)
        _fill(items, res)
        return
    static = static_for(params, wa)
    order = work_order(stack_params(params), int(wa.prompt.shape[1]))
    items = [items[i] for i in order]
    size = batch_size(len(items), chunk)
    chunks = [items[i:i + size] for i in range(0, len(items), size)]

    def padded(c):  # pad the last chunk: one batch size, one compile
        ps = [p for _, p, _ in c]
        return ps + [ps[-1]] * (size - len(ps))

    try:
        import ray
    except ImportError:
        raise SweepError("--ray needs the ray package (pip install 'simrl[ray]'); it is not installed") from None
    ray.init(address=ray_address, ignore_reinit_error=True)
    task = ray.remote(_fast_batch)
    futures = [task.remote(static, padded(c), wa) for c in chunks]
    for c, f in zip(chunks, futures, strict=True):
        _fill(c, ray.get(f))
        tick(len(c))


def _fill(items: list[tuple[Job, Any, Any]], res) -> None:
    for m, (job, _, _) in enumerate(items):
        job.row.update(fast_metrics(res, m, job.gpus))
        job.row.setdefault("status", "ok" if job.row["complete"] else "failed")
        if not job.row["complete"]:
            job.row["reason"] = "fast: stuck (a batch can never form)" if bool(res.stuck[m]) else "fast: incomplete"
        job.row["engine"] = "fast"


class CompileClock:
    """Seconds jax spends tracing, lowering and compiling (or loading compiled programs from the
    persistent cache) while the block runs: the ``/jax/core/compile/*`` duration events, and the
    fast path's loading and storing of whole compiled programs (``/simrl_fast/program/*``,
    `simrl_fast.engine.program_dir`)."""

    def __init__(self):
        self.seconds = 0.0
        self._listener = None

    def _on(self, event: str, duration: float, **kwargs) -> None:
        if event.startswith(("/jax/core/compile/", "/simrl_fast/program/")):
            self.seconds += duration

    def __enter__(self):
        try:
            import jax.monitoring as mon
        except ImportError:  # no jax: nothing compiles
            return self
        mon.register_event_duration_secs_listener(self._on)
        self._listener = mon
        return self

    def __exit__(self, *exc):
        if self._listener is not None:
            self._listener.unregister_event_duration_listener(self._on)
        return False


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


def run_jobs(space: Space, fast: dict, oracle: list[Job], jobs: int, chunk: int, ray_address: str | None,
             tick: Callable[[int], None]) -> None:
    """Oracle jobs go to the spawn pool first (they run while the fast batches run here)."""
    import threading

    lock = threading.Lock()

    def done(job: Job):
        def cb(row: dict) -> None:
            with lock:
                job.row.update(row)
                job.row.setdefault("status", "ok" if row.get("complete") else "failed")
                job.row["engine"] = "simpy"
            tick(1)
        return cb

    if oracle:
        with OraclePool(min(jobs, len(oracle))) as pool:
            pending = [pool.submit(oracle_args(space, j), done(j)) for j in oracle]
            for items in fast.values():
                run_fast(items, chunk, ray_address, tick)
            for p in pending:
                p.get()
    else:
        for items in fast.values():
            run_fast(items, chunk, ray_address, tick)
