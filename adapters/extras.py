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


def require_cuda_gpus(n: int, what: str, torch: ModuleType | None = None) -> ModuleType:
    """Refuse unless torch sees at least ``n`` CUDA GPUs; the message says what ``what`` needs.

    Returns torch. Raised as `MissingExtraError` (the CLIs turn it into exit code 2)."""
    if torch is None:
        torch = require("torch", "profile-torch", what)
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < n:
        raise MissingExtraError(
            f"{what} needs {n} CUDA GPU{'s' if n != 1 else ''} (an NVIDIA GPU and a CUDA build of torch); "
            f"torch {torch.__version__} sees {have}. Run it on a GPU machine (third_party/install.sh "
            "installs the pinned stack)."
        )
    return torch
