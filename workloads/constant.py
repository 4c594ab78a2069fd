"""The `constant` generator: every length from a knob, for analytic tests.

Every trajectory has ``calls`` calls; the first prompt is ``prompt`` tokens (``shared_prompt``
of them shared by the group; -1 means the whole prompt), each later call appends ``new_tokens``,
every completion is ``completion`` tokens and every call (the last included) is followed by
``tool_latency_s`` of tool time. Rewards alternate 0, 1, 0, ... within a group. Nothing is random:
the seed is recorded but changes nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workloads.shapes import DEFAULT_MAX_MODEL_LEN, assemble, fit_context
from workloads.types import GeneratorSpec, Workload

CONSTANT_KNOBS: dict[str, Any] = {
    "prompt": 512,
    "completion": 256,
    "calls": 1,
    "new_tokens": 64,
    "tool_latency_s": 0.0,
    "shared_prompt": -1,
    "max_model_len": DEFAULT_MAX_MODEL_LEN,
}


def _constant(groups: int, seed: int, n: int, knobs: dict[str, Any]) -> Workload:
    for key, low in (("prompt", 1), ("completion", 1), ("calls", 1), ("new_tokens", 0),
                     ("shared_prompt", -1), ("max_model_len", 2)):
        if knobs[key] < low:
            raise ValueError(f"constant: knob {key}={knobs[key]} must be >= {low}")
    latency_s = knobs["tool_latency_s"]
    if not (np.isfinite(latency_s) and latency_s >= 0):
        raise ValueError(f"constant: knob tool_latency_s={latency_s} must be finite and >= 0")
    if knobs["shared_prompt"] > knobs["prompt"]:
        raise ValueError(f"constant: knob shared_prompt={knobs['shared_prompt']} exceeds prompt={knobs['prompt']}")
    T, K = groups * n, knobs["calls"]
    new = np.full((T, K), knobs["new_tokens"], dtype=np.int64)
    completion = np.full((T, K), knobs["completion"], dtype=np.int64)
    prompt, new, completion = fit_context(np.full(T, knobs["prompt"]), new, completion, knobs["max_model_len"])
    latency = np.full((T, K), float(latency_s))
    shared = knobs["prompt"] if knobs["shared_prompt"] < 0 else knobs["shared_prompt"]
    reward = np.tile(np.arange(n) % 2, groups).astype(np.float64)
    return assemble("constant", seed, dict(knobs), n, np.full(groups, shared), prompt, new, completion,
                    latency, np.zeros((T, K), dtype=bool), reward)


SPECS = (
    GeneratorSpec("constant", _constant, 4, CONSTANT_KNOBS,
                  "all lengths from knobs (prompt, completion, calls, new_tokens, tool_latency_s)"),
)
