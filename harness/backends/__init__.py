"""Backend drivers: `art` and `skyrl` (real, need GPUs) and `sim` (drives simrl).

A driver is a module with ``run(ctx: RunContext) -> BackendOutcome`` that records evidence
through ``ctx.sink`` as updates and calls complete. `load(backend, runtime)` picks the module;
heavy upstream packages are imported inside the drivers, never here.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from harness.errors import BenchError


def load(backend: str, runtime: str) -> ModuleType:
    name = "harness.backends.sim" if runtime == "sim" else f"harness.backends.{backend}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise BenchError(f"the {runtime!r} runtime for backend {backend!r} is not available "
                             f"in this checkout ({name} is missing)") from exc
        raise
