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
from typing import NamedTuple

import jax

jax.config.update("jax_enable_x64", True)
if os.environ.get("SIMRL_FAST_CACHE_DIR"):
    # Opt-in persistent compilation cache: a compile costs seconds, a cached one milliseconds.
    jax.config.update("jax_compilation_cache_dir", os.environ["SIMRL_FAST_CACHE_DIR"])

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from simrl_fast.lowering import Params, Static, WorkloadArrays, lower, stack_params, static_for  # noqa: E402
from simrl_fast.results import FastResults  # noqa: E402
from simrl_fast.state import T_DONE, SimState, init_state  # noqa: E402
from simrl_fast.step import make_step  # noqa: E402

TRACE_COUNT = {"run": 0}


class LoopCarry(NamedTuple):
    """The outer while-loop carry: the state and how many scan chunks have run."""

    state: SimState
    chunks: jnp.ndarray  # int32


def _run_one(p: Params, w, static: Static) -> SimState:
    step = make_step(static)

    def scan_body(st, _):
        return step(st, p, w), None

    def body(c: LoopCarry) -> LoopCarry:
        st, _ = jax.lax.scan(scan_body, c.state, None, length=static.chunk)
        return LoopCarry(st, c.chunks + 1)

    def cond(c: LoopCarry):
        st = c.state
        live = (st.trainer.phase != T_DONE) & ~st.stuck & ~st.overflow
        return live & (c.chunks < static.max_chunks)

    return jax.lax.while_loop(cond, body, LoopCarry(init_state(static), jnp.int32(0))).state


@functools.partial(jax.jit, static_argnums=(0, 3))
def _run_batch(static: Static, params: Params, w, per_config_workload: bool) -> SimState:
    TRACE_COUNT["run"] += 1
    return jax.vmap(_run_one, in_axes=(0, 0 if per_config_workload else None, None))(params, w, static)


def run(static: Static, params_batch: Params, workload, per_config_workload: bool = False) -> FastResults:
    """Run a stacked batch of configurations (leading axis M).

    ``workload`` is one `WorkloadArrays` shared by all, or (``per_config_workload``) stacked
    along the same leading axis, every workload with the same (groups, group size).
    """
    st = _run_batch(static, jax.tree_util.tree_map(jnp.asarray, params_batch),
                    jax.tree_util.tree_map(jnp.asarray, workload), per_config_workload)
    st = jax.device_get(st)
    return FastResults.from_state(st, np.asarray(params_batch.steps), static)


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
