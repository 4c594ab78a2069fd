"""Policies by name. Built-ins register here; presets register from `presets/` on import."""

from __future__ import annotations

import importlib

_REGISTRY: dict[str, type] = {}
_LOADED = False


def register(cls: type) -> type:
    """Class decorator: make a policy selectable as ``policy=<cls.kind>``."""
    kind = cls.kind
    if kind in _REGISTRY and _REGISTRY[kind] is not cls:
        raise ValueError(f"policy kind {kind!r} registered twice ({_REGISTRY[kind].__name__}, {cls.__name__})")
    _REGISTRY[kind] = cls
    return cls


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    importlib.import_module("simrl.policy.builtin")
    try:
        importlib.import_module("presets")
    except ModuleNotFoundError as exc:  # presets/ is part of the distribution; tolerate partial installs
        if exc.name != "presets":
            raise


def policy_class(kind: str) -> type:
    _load()
    return _REGISTRY[kind]


def policy_kinds() -> list[str]:
    _load()
    return sorted(_REGISTRY)
