"""The generator registry: `generate(name, groups, seed, group_size, **knobs)` and its knob checks.

Each generator module declares `GeneratorSpec` records (`workloads.types`) (a function, a default group size and
its knobs with defaults). This module owns the table, rejects unknown names and knobs with the
valid ones listed, coerces knob values (the CLI passes strings) to the default's type, and
records the resolved knobs on the returned workload so a trace says how it was made.
"""

from __future__ import annotations

import json
import math
import numbers
import operator
from typing import Any

import attrs
import numpy as np

from workloads.strictio import did_you_mean
from workloads.types import GeneratorSpec, Workload

MAX_TRAJECTORIES = 50_000_000
PROBE_GROUPS = 16
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _specs() -> dict[str, GeneratorSpec]:
    # Imported here: the generators are loaded on first use only.
    from workloads import benchmark, constant, rl

    table = {}
    for spec in (*rl.SPECS, *benchmark.SPECS, *constant.SPECS):
        table[spec.name] = spec
    return table


def generator_names() -> list[str]:
    """Names of every registered generator, sorted."""
    return sorted(_specs())


def generator_spec(name: str) -> GeneratorSpec:
    """The registered spec for ``name``; ValueError listing the valid names otherwise."""
    specs = _specs()
    if name not in specs:
        raise ValueError(f"unknown workload generator {name!r}{did_you_mean(str(name), specs)}; "
                         f"valid: {', '.join(sorted(specs))}")
    return specs[name]


def coerce_knob(generator: str, key: str, value: Any, default: Any) -> Any:
    """``value`` converted to the type of ``default`` (strings parsed), or ValueError naming the knob."""
    where = f"{generator}: knob {key}={value!r}"
    if isinstance(default, bool):
        if isinstance(value, bool | np.bool_):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError(f"{where} must be a boolean (true/false)")
    if isinstance(default, int):
        out = None
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            out = int(value)
        elif isinstance(value, numbers.Real) and math.isfinite(float(value)) and float(value).is_integer():
            out = int(value)
        elif isinstance(value, str):
            try:
                out = int(value.strip())
            except ValueError:
                pass
        if out is None:
            raise ValueError(f"{where} must be an integer")
        if not -(2**63) <= out < 2**63:  # numpy draws take 64-bit integers (an OverflowError otherwise)
            raise ValueError(f"{generator}: knob {key} must be an integer in the 64-bit range, got {value!r:.40}")
        return out
    if isinstance(default, float):
        x = None
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            x = float(value)
        elif isinstance(value, str):
            try:
                x = float(value.strip())
            except ValueError:
                pass
        if x is None:
            raise ValueError(f"{where} must be a number")
        if not math.isfinite(x):
            raise ValueError(f"{where} must be a finite number (nan, inf and overflow such as 1e400 are refused)")
        return x
    if isinstance(default, list):
        if isinstance(value, str):
            from workloads.strictio import StrictInputError, loads

            try:
                value = loads(value)  # strict: NaN, Infinity, 1e400 and duplicate keys refused
            except (json.JSONDecodeError, StrictInputError) as exc:
                why = exc.msg if isinstance(exc, json.JSONDecodeError) else exc.message
                raise ValueError(f"{where} must be a JSON list of finite numbers such as [[0, 10], [1, 100]] "
                                 f"({why})") from None
        if isinstance(value, list | tuple):
            return [list(v) if isinstance(v, list | tuple) else v for v in value]
        raise ValueError(f"{where} must be a list such as [[0, 10], [1, 100]]")
    return value


def resolve_knobs(spec: GeneratorSpec, knobs: dict[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with ``knobs``; unknown keys rejected with the valid ones listed."""
    unknown = sorted(set(knobs) - set(spec.knobs))
    if unknown:
        raise ValueError(f"{spec.name}: unknown knob(s) {', '.join(unknown)}"
                         f"{did_you_mean(unknown[0], spec.knobs)}; valid: {', '.join(sorted(spec.knobs)) or '(none)'}")
    out = {k: (list(v) if isinstance(v, list) else v) for k, v in spec.knobs.items()}
    for key, value in knobs.items():
        out[key] = coerce_knob(spec.name, key, value, spec.knobs[key])
    return out


def generate(name: str, groups: int, seed: int, group_size: int | None = None, **knobs: Any) -> Workload:
    """Draw ``groups`` prompt groups of generator ``name`` from ``seed``.

    ``group_size`` (trajectories per group) defaults to the generator's own. Generation is a pure
    function of its arguments, and group g is the same whatever ``groups`` is (a longer workload
    extends a shorter one). Raises ValueError for an unknown name, knob or bad value.
    """
    spec = generator_spec(name)
    groups = _count_arg(name, "groups", groups, 1)
    seed = _count_arg(name, "seed", seed, 0)
    size = _count_arg(name, "group_size", spec.default_group_size if group_size is None else group_size,
                      spec.min_group_size)
    from workloads.drift import DRIFT_KNOBS, check_drift

    drift = check_drift(name, {k: knobs.pop(k) for k in list(knobs) if k in DRIFT_KNOBS and k not in spec.knobs},
                        coerce_knob)
    resolved = resolve_knobs(spec, knobs)
    if groups * size > MAX_TRAJECTORIES:
        raise ValueError(f"{name}: {groups} groups x {size} trajectories = {groups * size} trajectories exceeds "
                         f"the {MAX_TRAJECTORIES} a trace can hold in memory; draw fewer groups")
    if groups > PROBE_GROUPS:
        # Cheap validation first: group g does not depend on `groups`, so a request that cannot be
        # drawn (knobs that contradict each other, a max_model_len below every prompt) fails on
        # these first groups in milliseconds instead of after drawing every sample.
        spec.build(PROBE_GROUPS, seed, size, resolved)
    w = spec.build(groups, seed, size, resolved)
    if drift:
        w = attrs.evolve(w, knobs={**w.knobs, **drift})
    return w


def _count_arg(gen: str, key: str, value: Any, minimum: int) -> int:
    """An integer argument (numpy integers accepted, bools and floats not) that is >= ``minimum``."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{gen}: {key} must be an integer >= {minimum}, got {value!r}") from None
    if value < minimum:
        raise ValueError(f"{gen}: {key} must be an integer >= {minimum}, got {value!r}")
    return value
