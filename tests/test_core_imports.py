"""`import simrl` and the core packages must work without jax, torch, vllm or ray."""

import subprocess
import sys

# In a fresh interpreter: other tests of the session (the torch profilers) import torch themselves.
PROBE = """
import importlib, sys
for mod in ("simrl", "simrl.config", "simrl.policy", "workloads", "presets", "harness", "adapters",
            "adapters.cli", "adapters.fsdp", "adapters.vllm_iter", "adapters.megatron", "adapters.weight_sync"):
    importlib.import_module(mod)
print(",".join(h for h in ("torch", "vllm", "ray", "megatron") if h in sys.modules))
"""


def test_core_packages_import_without_heavy_deps():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "", f"imported by a core package: {out.stdout.strip()}"
