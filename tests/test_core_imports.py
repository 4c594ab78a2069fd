"""`import simrl` and the core packages must work without jax, torch, vllm or ray."""

import importlib
import sys


def test_core_packages_import_without_heavy_deps():
    for mod in ("simrl", "simrl.config", "simrl.policy", "workloads", "presets", "harness", "adapters"):
        importlib.import_module(mod)
    for heavy in ("torch", "vllm", "ray"):
        assert heavy not in sys.modules, f"{heavy} was imported by a core package"
