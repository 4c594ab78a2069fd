"""Policies by name: the two built-ins, classes passed to `register`, and the entry points of
the group ``simrl.policies``.

An installed distribution adds policies by declaring entry points ``<kind> = "module:Class"``
in that group (this repository's `presets/` does so in pyproject.toml). The seam never imports
an implementation by name: a source checkout that was never installed has no entry points, and
then the CLI layer (`simrl.cli`) imports `presets` itself.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points

from simrl.policy.builtin import BoundedAsyncPolicy, SyncPolicy

#: the entry-point group policies are discovered through
ENTRY_POINT_GROUP = "simrl.policies"

_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make a policy selectable as ``policy=<cls.kind>``."""
    kind = cls.kind
    if kind in _REGISTRY and _REGISTRY[kind] is not cls:
        raise ValueError(f"policy kind {kind!r} registered twice ({_REGISTRY[kind].__name__}, {cls.__name__})")
    _REGISTRY[kind] = cls
    return cls


register(SyncPolicy)
register(BoundedAsyncPolicy)


@cache
def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def entry_point_kinds() -> list[str]:
    """Kinds declared by installed distributions (empty in a checkout that was never installed)."""
    return sorted(_entry_points())


def policy_class(kind: str) -> type:
    """The policy class for ``kind``; KeyError when no registration or entry point names it."""
    if kind not in _REGISTRY:
        ep = _entry_points().get(kind)
        if ep is None:
            raise KeyError(kind)
        cls = ep.load()
        if getattr(cls, "kind", None) != kind:
            raise ValueError(f"entry point {kind!r} = {ep.value!r} in group {ENTRY_POINT_GROUP} "
                             f"loads a class whose kind is {getattr(cls, 'kind', None)!r}")
        register(cls)
    return _REGISTRY[kind]


def policy_kinds() -> list[str]:
    return sorted(set(_REGISTRY) | set(_entry_points()))
