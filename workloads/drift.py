"""Response length that drifts over training steps (non-stationary workloads).

Real RL runs change what they generate as the policy learns: DAPO / GRPO math runs grow their
responses over training. A workload carries the drift as two knobs any generator accepts
(`DRIFT_KNOBS`); the simulator scales each call's forced completion length by the factor of the
weight version its group was dispatched with (version v = after v training steps):

* ``length_growth_per_step`` g: factor ``1 + g * v`` (linear; 0.01 = +1 % of the drawn length per
  step; negative shrinks, floored at one token);
* ``length_drift_knots`` ``[[step, factor], ...]``: piecewise-linear in the step, held flat before
  the first and after the last knot (steps strictly increasing, factors > 0).

At most one of them is set. The scaled length is ``max(1, round_half_even(L * factor))``, capped
at ``max_model_len - prompt`` when the workload has ``max_model_len``. The drawn arrays are not
changed: the drift is applied by the engine when a call is submitted.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

#: knobs every generator accepts, with their defaults (a default value means "no drift")
DRIFT_KNOBS: dict[str, Any] = {"length_growth_per_step": 0.0, "length_drift_knots": []}


@attrs.frozen
class LengthDrift:
    growth: float = 0.0
    knots: tuple[tuple[float, float], ...] = ()

    def factor(self, version: int) -> float:
        if self.knots:
            xs = [k[0] for k in self.knots]
            if version <= xs[0]:
                return self.knots[0][1]
            if version >= xs[-1]:
                return self.knots[-1][1]
            for (x0, f0), (x1, f1) in zip(self.knots, self.knots[1:], strict=False):
                if x0 <= version <= x1:
                    return f0 + (f1 - f0) * (version - x0) / (x1 - x0)
        return 1.0 + self.growth * version

    def completion(self, tokens: int, prompt: int, version: int, max_model_len: int | None) -> int:
        out = max(1, round(tokens * self.factor(version)))
        if max_model_len is not None:
            out = min(out, max(1, max_model_len - prompt))
        return out


def check_drift(where: str, knobs: dict[str, Any], coerce) -> dict[str, Any]:
    """The drift knobs coerced (``coerce(where, key, value, default)``, the registry's) and checked;
    ValueError naming the knob otherwise. Returns only those that differ from no drift."""
    out = {k: coerce(where, k, knobs[k], d) for k, d in DRIFT_KNOBS.items() if k in knobs}
    g = out.get("length_growth_per_step", 0.0)
    if not math.isfinite(g):
        raise ValueError(f"{where}: knob length_growth_per_step={g!r} must be a finite number")
    knots = out.get("length_drift_knots", [])
    if g and knots:
        raise ValueError(f"{where}: set length_growth_per_step or length_drift_knots, not both")
    prev = -math.inf
    for i, k in enumerate(knots):
        if (not isinstance(k, list) or len(k) != 2
                or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in k)):
            raise ValueError(f"{where}: knob length_drift_knots[{i}]={k!r} must be [step, factor]")
        if not k[0] > prev or k[0] < 0:
            raise ValueError(f"{where}: knob length_drift_knots steps must be >= 0 and strictly increasing "
                             f"(knot {i}: {k[0]!r})")
        if not (k[1] > 0 and math.isfinite(k[1])):
            raise ValueError(f"{where}: knob length_drift_knots[{i}] factor {k[1]!r} must be > 0")
        prev = k[0]
    return {k: v for k, v in out.items() if v != DRIFT_KNOBS[k]}


def drift_of(knobs: dict[str, Any]) -> LengthDrift | None:
    """The workload's drift, or None when it has none (the engine then reads the arrays as drawn)."""
    g = float(knobs.get("length_growth_per_step", 0.0) or 0.0)
    knots = tuple((float(a), float(b)) for a, b in knobs.get("length_drift_knots", []) or [])
    if not g and not knots:
        return None
    return LengthDrift(g, knots)
