"""System presets: one module per upstream framework, each a typed policy registered by name.

Every module in this package is imported here, so adding `presets/<name>.py` with a
`@register`-decorated policy class is all it takes to make `policy=<name>` selectable.
Presets import only simrl's policy seam (`simrl.policy`).
"""

import importlib
import pkgutil

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_mod}")
