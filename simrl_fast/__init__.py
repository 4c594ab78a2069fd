"""simrl_fast: the JAX event engine, vmapped over configurations, held against the SimPy oracle.

`lower(cfg, workload, costs) -> (Static, Params, WorkloadArrays)` checks a configuration
against the declared feature set (`FEATURES`; anything else raises `FastPathUnsupported`
naming the feature) and lowers it to arrays; `run(static, params_batch, workload)` and
`simulate_batch(configs, workload, costs)` run batches. The lowering is numpy-only; jax is
imported (with float64 enabled) only when `run` / `simulate_batch` are first used.
See docs/fastpath.md.

Importing the package caps XLA's CPU instruction set at SSE4.2 (``--xla_cpu_max_isa=SSE4_2`` appended
to ``XLA_FLAGS`` unless it names a cap already): on a CPU with FMA, XLA contracts ``c + a*b`` into
one fused multiply-add (one rounding instead of two), and the fast path would no longer compute
SimPy's floats. It takes effect if jax has not created its CPU backend yet; `engine.run` warns
(`InexactArithmeticWarning`) when a multiply-add still comes out fused.
"""

import os as _os


def _no_fused_multiply_add() -> None:
    flags = _os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_max_isa" not in flags:
        _os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_max_isa=SSE4_2".strip()


_no_fused_multiply_add()

from simrl_fast.lowering import (  # noqa: E402  (after the XLA flag above)
    FEATURES,
    FastPathNoProgress,
    FastPathUnsupported,
    Params,
    Static,
    WorkloadArrays,
    lower,
    stack_params,
)

__all__ = [
    "FEATURES", "FastPathNoProgress", "FastPathUnsupported", "Params", "Static", "WorkloadArrays", "lower", "run", "run_params",
    "simulate_batch", "stack_params",
]


def __getattr__(name):
    if name in ("run", "simulate_batch", "run_params", "FastResults"):
        from simrl_fast import engine

        return getattr(engine, name) if name != "FastResults" else engine.FastResults
    raise AttributeError(name)
