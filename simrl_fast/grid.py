"""Lowering a whole grid at once: the base configuration is parsed and lowered once, and the swept
values are written straight into the stacked `Params` arrays (numpy, vectorised).

`lower_grid(workload, costs, columns, base=..., config_path=...)` takes ``columns``, a mapping from
a key to M values (point m has ``columns[key][m]``), and returns ``(static, params, wa)`` with
``params`` stacked along the leading axis M, ready for `simrl_fast.engine.run`. Three kinds of keys:

- *direct* configuration keys (`DIRECT`), whose value the lowering copies into one Params field
  and reads nowhere else: each distinct value is checked once, by loading and lowering the base
  configuration with that value alone (so a bad value is rejected exactly as `lower` rejects it,
  naming the key), then the column is written with one fancy-indexing assignment;
- cost columns (`COST_COLUMNS`): the coefficients of the linear rollout form, the training step
  ``a + per_token * tokens`` and the publication time, replacing those of the shared ``costs``
  (checked as `lower` checks them: finite, non-negative, no zero iteration, step or publication time);
- every other configuration key: points are grouped by their combination of such values and each
  distinct combination is loaded and lowered once (`load_config` + `lower`), then broadcast.

Nothing is approximated: every Params row equals what ``lower(load_config(base + point), ...)``
gives (tests/fast/test_grid.py checks it), and `FastPathUnsupported` names the first point and
feature the fast path does not take. Only ``costs`` shared by the whole grid is accepted (cost
models built from each point's configuration go through `lower` per point).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from simrl_fast.lowering import (
    ROUTERS,
    FastPathUnsupported,
    Params,
    Static,
    WorkloadArrays,
    check_supported,
    cost_fields,
    lower,
    lower_workload,
    static_for,
)

#: configuration key -> the one Params field `lower` copies it into (and how the value reads there)
DIRECT = {
    "deployment.rollout.max_num_seqs": ("max_seqs", int),
    "deployment.rollout.kv_capacity_tokens": ("kv_cap", int),
    # (dp_shard also sets Params.shard, derived from the point: a column holding it is lowered per value)
    "router.name": ("router", lambda v: -1 if str(v) == "dp_shard" else ROUTERS.get(str(v), -1)),
    "run.training_steps": ("steps", int),
}

#: cost column -> Params field (the shared cost models' coefficients, replaced per point)
COST_COLUMNS = {
    "cost.rollout.a": "a", "cost.rollout.b": "b", "cost.rollout.c": "c", "cost.rollout.p": "p",
    "cost.training.a": "train_a", "cost.training.per_token": "train_per_token",
    "cost.weight_sync.publish_s": "sync_s",
}


def lower_like(row: Params, cfg, workload, costs, wa: WorkloadArrays) -> Params:
    """``lower(cfg, workload, costs, wa=wa)[1]`` for a configuration that differs from the one
    lowered to ``row`` only in its cost models and cost knobs (`CostConfig.*_knobs`; in srl-sweep,
    points of one skeleton, e.g. cost coefficients drawn per point): `lower`'s checks
    (`check_supported`, the KV capacity, the publication time, the training memory) and its cost
    fields (KV capacity, the rollout form or record, the training terms or record, the publication
    time) computed as `lower` computes them, every other field copied from ``row`` (they read the
    policy, router, run and deployment sections only). Raises `FastPathUnsupported` where `lower`
    would. srl-sweep also lowers a second point of each skeleton in full and compares
    (`simrl_explore.runner.route`), so a cost-dependent field added to `lower` and not here
    shows as a mismatch, not as a wrong row."""
    check_supported(cfg, workload, costs)
    return row._replace(**cost_fields(cfg, costs, wa, int(row.batch_max)))


def same_params(a: Params, b: Params) -> bool:
    """Field by field, the same dtype and bytes."""
    return all(np.asarray(x).dtype == np.asarray(y).dtype and np.asarray(x).tobytes() == np.asarray(y).tobytes()
               for x, y in zip(a, b, strict=True))


def _fmt(v) -> str:
    if isinstance(v, bool | np.bool_):
        return "true" if v else "false"
    if isinstance(v, np.generic):
        v = v.item()
    return str(v)


def lower_grid(workload, costs, columns: Mapping[str, Sequence], base: Sequence[str] = (),
               config_path: str | None = None, wa: WorkloadArrays | None = None,
               configs: Sequence | None = None, with_static: bool = True) -> tuple[Static | None, Params, WorkloadArrays]:
    """Lower M grid points sharing ``workload`` and ``costs``: (Static, Params stacked [M], WorkloadArrays).

    ``configs``: the M points' configurations where the caller has built them already (srl-sweep
    does, for its feasibility checks): a value or combination is then lowered from the first
    point that has it, instead of loading ``base`` + the values again. ``with_static=False``: the
    Static is not computed (None), for a caller that stacks several grids."""
    from simrl.config import load_config

    base = list(base)
    wa = lower_workload(workload) if wa is None else wa
    cols = {k: np.asarray(v) for k, v in columns.items()}
    sizes = {k: len(v) for k, v in cols.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"lower_grid: columns of different lengths {sizes}")
    M = next(iter(sizes.values())) if sizes else 1

    if configs is not None and len(configs) != M:
        raise ValueError(f"lower_grid: {len(configs)} configurations for {M} grid points")

    def lower_at(overrides: list[str], where: str, m: int) -> Params:
        try:
            cfg = configs[m] if configs is not None else load_config(config_path, [*base, *overrides])
            return lower(cfg, workload, costs, wa=wa)[1]
        except FastPathUnsupported as exc:
            raise FastPathUnsupported(f"grid {where}: {exc}") from None

    # direct keys: one check per distinct value at the base; a value the lowering does not copy
    # verbatim (e.g. a null KV capacity, derived from the cost model) makes the key a grouped one
    direct: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}
    for key in [k for k in cols if k in DIRECT]:
        field, read = DIRECT[key]
        uniq, first, inv = np.unique(cols[key], return_index=True, return_inverse=True)
        vals = []
        for u, m in zip(uniq, first, strict=True):
            p = lower_at([f"{key}={_fmt(u)}"], f"{key}={_fmt(u)}", int(m))
            vals.append(getattr(p, field))
        if all(_fmt(u) not in ("None", "null") and v == read(u) for u, v in zip(uniq, vals, strict=True)):
            direct[key] = (field, np.asarray(vals), inv)
    grouped = [k for k in cols if k not in direct and k not in COST_COLUMNS]

    # grouped keys: one load_config + lower per distinct combination
    if grouped:
        keys = [tuple(_fmt(cols[k][m]) for k in grouped) for m in range(M)]
        combos: dict[tuple, int] = {}
        firsts: list[int] = []
        for m, t in enumerate(keys):
            if t not in combos:
                combos[t] = len(combos)
                firsts.append(m)
        inv = np.fromiter((combos[t] for t in keys), np.int64, M)
        rows = [lower_at([f"{k}={v}" for k, v in zip(grouped, t, strict=True)],
                         " ".join(f"{k}={v}" for k, v in zip(grouped, t, strict=True)), m)
                for t, m in zip(combos, firsts, strict=True)]
    else:
        inv = np.zeros(M, np.int64)
        rows = [lower_at([], "base", 0)]
    table = Params(*(np.stack([np.asarray(getattr(r, f)) for r in rows]) for f in Params._fields))
    params = Params(*(np.ascontiguousarray(getattr(table, f)[inv]) for f in Params._fields))

    for field, vals, vinv in direct.values():
        getattr(params, field)[...] = vals[vinv]
    for key in [k for k in cols if k in COST_COLUMNS]:
        field = COST_COLUMNS[key]
        kind = {"a": params.ro_kind, "b": params.ro_kind, "c": params.ro_kind, "p": params.ro_kind,
                "train_a": params.tr_kind, "train_per_token": params.tr_kind}.get(field)
        if kind is not None and np.any(kind != 0):
            raise FastPathUnsupported(f"grid column {key}: the cost model is not a linear form (roofline or "
                                      "analytical); its coefficients are not swept")
        if field == "sync_s" and np.any(params.colocated != 0):
            raise FastPathUnsupported(f"grid column {key} with colocated placement: the publication is "
                                      "Costs.offload_after_s, lowered per configuration; sweep it point by point")
        x = cols[key].astype(np.float64)
        bad = ~np.isfinite(x) | (x < 0)
        if bad.any():
            m = int(np.argmax(bad))
            raise ValueError(f"lower_grid: {key} at point {m} is {x[m]!r}; expected a finite number >= 0")
        getattr(params, field)[...] = x
        if field == "sync_s":  # per-instance sync: the column is one instance's pull time too (publish_s)
            params.pull_s[...] = np.where(params.pull_s > 0, x, 0.0)
    _check_costs(params)
    return (static_for_stacked(params, wa) if with_static else None), params, wa


def _check_costs(p: Params) -> None:
    """The checks `lower` makes on the cost numbers (simrl_fast.lowering._rollout_form etc.), per point."""
    for what, bad in (("a linear rollout model with a + b = 0", (p.ro_kind == 0) & (p.a + p.b <= 0)),
                      ("a training step time that can be 0",
                       (p.tr_kind == 0) & (p.train_a + p.train_per_token <= 0)),
                      ("a weight publication time of 0", ~(p.sync_s > 0))):
        if np.any(bad):
            m = int(np.argmax(bad))
            raise FastPathUnsupported(f"simrl_fast does not support {what} (grid point {m}); use the SimPy engine")


def static_for_stacked(params: Params, wa: WorkloadArrays, max_groups: int | None = None) -> Static:
    """`static_for` of stacked Params (the bound over all rows, computed without unstacking each row)."""
    return _static_vectorised(params, wa, max_groups)


def _static_vectorised(params: Params, wa: WorkloadArrays, max_groups: int | None) -> Static:
    from simrl_fast.lowering import group_bound

    one = Params(*(np.asarray(getattr(params, f)).max() for f in Params._fields))
    if max_groups:
        return static_for([one], wa, max_groups)

    # group_bound depends on (steps, batch, budget_base, budget_per_version, conc, budget_per_batch,
    # count_since_pub, batch_max, ep_cap, ship_lag, cross, stale_abort): one call per distinct row
    fields = ("steps", "batch", "budget_base", "budget_per_version", "conc", "budget_per_batch", "count_since_pub",
              "batch_max", "ep_cap", "ship_lag", "cross", "stale_abort")
    key = np.stack([np.asarray(getattr(params, f), np.float64) for f in fields], axis=1)
    uniq = np.unique(key, axis=0)
    zero = Params(*(np.asarray(0) for _ in Params._fields))  # only the fields group_bound reads matter
    ints = {"steps", "batch", "count_since_pub", "batch_max", "ep_cap", "ship_lag", "cross", "stale_abort"}
    mg = max(group_bound(zero._replace(**{f: np.int32(u[j]) if f in ints else u[j] for j, f in enumerate(fields)}))
             for u in uniq)
    return static_for([one], wa, mg)


def unstack(params: Params) -> list[Params]:
    """The rows of stacked Params (for APIs that take a list)."""
    m = len(params.steps)
    return [Params(*(getattr(params, f)[i] for f in Params._fields)) for i in range(m)]
