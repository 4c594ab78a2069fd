"""Click command-line tools: `srl`, `srl-sweep`, `srl-regress`, `srl-plot`, `srl-compare`, ...

The CLI layer sits above `presets/`. Presets normally arrive through the ``simrl.policies``
entry points of the installed distribution; in a source checkout that was never installed there
are none, and the CLI layer imports them itself (the policy seam never does).
"""

from simrl.policy.registry import entry_point_kinds

if not entry_point_kinds():
    import presets  # noqa: F401  (registers every preset)
