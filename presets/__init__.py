"""System presets: one module per upstream framework, each a typed policy registered by name.

The policy registry finds each preset through its ``simrl.policies`` entry point
(pyproject.toml); importing this package also registers every module in it (the CLI layer
does that in a checkout that was never installed). Presets import only simrl's policy seam
(`simrl.policy`).
"""

import importlib
import pkgutil

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_mod}")
