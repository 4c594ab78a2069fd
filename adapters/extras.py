"""Optional dependencies of the profilers, imported lazily with an error that names the extra.

The core install of simrl has no torch or vllm; a profiler that needs one calls `require` at the
moment it needs it, so `import adapters` (and `srl-profile --help`) never pulls them in.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtraError(RuntimeError):
    """A profiler's optional dependency is not installed; the message names the pip extra."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise `MissingExtraError` telling how to install ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{what} needs {module}, which is not importable here ({exc}); "
            f"install the `{extra}` extra: pip install 'simrl[{extra}]'"
        ) from exc
