"""Running the fast engine: jit + vmap over configurations, chunked scans, numpy results.

`run(static, params_batch, workload)` runs a stacked batch (leading axis M) and returns a
`FastResults` of numpy arrays. `simulate_batch(configs, workload, costs)` lowers each
configuration (rejecting unsupported ones), groups them into one Static, runs them, and
retries with more group slots if a run dispatched more groups than the Static held.
The step compiles once per (Static, M); `TRACE_COUNT` counts traces for the tests.
"""

from __future__ import annotations

import functools
import os

import jax

jax.config.update("jax_enable_x64", True)
if os.environ.get("SIMRL_FAST_CACHE_DIR"):
    # Opt-in persistent compilation cache: a compile costs seconds, a cached one milliseconds.
    jax.config.update("jax_compilation_cache_dir", os.environ["SIMRL_FAST_CACHE_DIR"])

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from simrl_fast.lowering import Params, Static, WorkloadArrays, lower, stack_params, static_for  # noqa: E402
from simrl_fast.results import FastResults  # noqa: E402
from simrl_fast.state import T_DONE, SimState, StepOut, init_state  # noqa: E402
from simrl_fast.step import make_step  # noqa: E402

TRACE_COUNT = {"run": 0}


def _chunk_one(st: SimState, p: Params, w, static: Static) -> tuple[SimState, StepOut]:
    """``static.chunk`` event-loop steps of one configuration; ys = what each step emitted."""
    step = make_step(static)

    def body(s, _):
        s = step(s, p, w)
        return s, s.out

    return jax.lax.scan(body, st, None, length=static.chunk)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _init_batch(static: Static, m: int) -> SimState:
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (m, *x.shape)), init_state(static))


@functools.partial(jax.jit, static_argnums=(0, 4), donate_argnums=(1,))
def _run_chunk(static: Static, st: SimState, params: Params, w, per_config_workload: bool):
    """One scan chunk of the whole batch: (state, ys [M, chunk], whether any configuration is live)."""
    TRACE_COUNT["run"] += 1
    one = functools.partial(_chunk_one, static=static)
    st, out = jax.vmap(one, in_axes=(0, 0, 0 if per_config_workload else None))(st, params, w)
    live = jnp.any((st.trainer.phase != T_DONE) & ~st.stuck & ~st.overflow)
    return st, out, live


def run(static: Static, params_batch: Params, workload, per_config_workload: bool = False) -> FastResults:
    """Run a stacked batch of configurations (leading axis M).

    ``workload`` is one `WorkloadArrays` shared by all, or (``per_config_workload``) stacked
    along the same leading axis, every workload with the same (groups, group size). The host
    runs scan chunks until no configuration is live (done, deadlocked or overflowed) or
    ``static.max_chunks`` have run; the per-call and per-group results are assembled from the
    steps' outputs.
    """
    params = jax.tree_util.tree_map(jnp.asarray, params_batch)
    w = jax.tree_util.tree_map(jnp.asarray, workload)
    m = int(np.asarray(params_batch.steps).shape[0])
    st = _init_batch(static, m)
    outs = []
    for _ in range(static.max_chunks):
        st, out, live = _run_chunk(static, st, params, w, per_config_workload)
        outs.append(out)
        if not bool(live):
            break
    st, outs = jax.device_get((st, outs))
    ys = StepOut(*(np.concatenate([getattr(o, f) for o in outs], axis=1) for f in StepOut._fields))
    return FastResults.from_state(st, np.asarray(params_batch.steps), static, _assemble(ys, static))


def _assemble(ys: StepOut, static: Static) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(call finish [M, R], call instance [M, R], group finish [M, Gm]) from the steps' outputs."""
    m = ys.fin_rid.shape[0]
    call_finish = np.full((m, static.max_calls), np.nan)
    call_inst = np.full((m, static.max_calls), -1, np.int32)
    group_finish = np.full((m, static.max_groups), np.nan)
    mi, ti = np.nonzero(ys.fin_rid >= 0)
    call_finish[mi, ys.fin_rid[mi, ti]] = ys.fin_t[mi, ti]
    mi, ti = np.nonzero(ys.fin_group)
    group_finish[mi, ys.fin_rid[mi, ti] // static.group_size] = ys.fin_t[mi, ti]
    mi, ti = np.nonzero(ys.route_rid >= 0)
    call_inst[mi, ys.route_rid[mi, ti]] = ys.route_inst[mi, ti]
    return call_finish, call_inst, group_finish


def simulate_batch(configs, workload, costs, chunk: int | None = None) -> FastResults:
    """Lower and run configurations sharing one workload; ``costs`` is one object or one per config.

    Raises `FastPathUnsupported` naming the first unsupported feature of any configuration.
    """
    costs_list = costs if isinstance(costs, list | tuple) else [costs] * len(configs)
    lowered = [lower(cfg, workload, c) for cfg, c in zip(configs, costs_list, strict=True)]
    wa = lowered[0][2]
    params = [p for _, p, _ in lowered]
    return run_params(params, wa, chunk=chunk)


def run_params(params: list[Params], wa, chunk: int | None = None, max_groups: int | None = None) -> FastResults:
    """Run lowered configurations in chunks of ``chunk``; grow the group slots on overflow.

    ``wa`` is one `WorkloadArrays` for all, or a list with one per configuration (same shapes).
    """
    per = isinstance(wa, list)
    static = static_for(params, wa[0] if per else wa, max_groups)
    chunk = chunk or len(params)
    parts = []
    for lo in range(0, len(params), chunk):
        batch = params[lo:lo + chunk]
        w = WorkloadArrays(*(np.stack([getattr(x, f) for x in wa[lo:lo + chunk]]) for f in WorkloadArrays._fields)) \
            if per else wa
        res = run(static, stack_params(batch), w, per_config_workload=per)
        if res.overflow.any():
            return run_params(params, wa, chunk, max_groups=2 * static.max_groups)
        parts.append(res)
    return FastResults.concat(parts)
