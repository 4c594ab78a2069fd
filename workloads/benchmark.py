"""The four benchmark workloads of the RL Systems Bench: multi_turn, long_generation,
tool_history and multi_turn_salted.

All four share one agentic shape: a group-shared first prompt (system/tool schema/task plus
``history_turns`` already-played assistant + observation turns), then ``calls`` new model calls
per trajectory, each later call preceded by a per-sample observation. Completion lengths are
forced (the harness sets min_tokens = max_tokens = L) and fitted under ``max_model_len``.
Rewards are 0/1 and vary inside every group, because ART drops zero-variance groups.
``multi_turn_salted`` draws from the ``multi_turn`` streams, so its token schedule is identical
and only ``call_cache_salted`` differs. Knot choices are explained in workloads/README.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workloads.sampling import Streams, dist
from workloads.shapes import DEFAULT_MAX_MODEL_LEN, assemble, fit_context, grid, synthetic_rewards
from workloads.types import GeneratorSpec, Workload

MULTI_TURN_KNOBS: dict[str, Any] = {
    "history_turns": 2,
    "calls": 3,
    # system prompt + tool schema + task statement, shared by the group
    "system_knots": [[0, 300], [0.25, 550], [0.5, 800], [0.9, 1500], [1, 2500]],
    # an already-played assistant turn inside the first prompt
    "history_assistant_knots": [[0, 40], [0.5, 200], [0.9, 600], [1, 1200]],
    # a tool observation / user turn appended before each call (and inside the history)
    "observation_knots": [[0, 16], [0.25, 60], [0.5, 150], [0.75, 350], [0.95, 900], [1, 2000]],
    # forced completion per new call
    "completion_knots": [[0, 32], [0.25, 120], [0.5, 250], [0.75, 450], [0.95, 900], [1, 1536]],
    "tool_latency_s": 0.0,
    "length_correlation": 0.3,
    "max_model_len": DEFAULT_MAX_MODEL_LEN,
}

LONG_GENERATION_KNOBS: dict[str, Any] = {
    "system_knots": [[0, 64], [0.5, 180], [0.9, 400], [1, 700]],
    # 512..4096 as the benchmark states; median ~1.1k with a long right tail (stragglers)
    "completion_knots": [[0, 512], [0.25, 760], [0.5, 1100], [0.75, 1700], [0.9, 2500], [0.99, 3700],
                         [1, 4096]],
    "length_correlation": 0.3,
    "max_model_len": DEFAULT_MAX_MODEL_LEN,
}

TOOL_HISTORY_KNOBS: dict[str, Any] = {
    "history_turns": 6,
    "calls": 1,
    # large tool schema (many JSON function definitions) + system + task
    "system_knots": [[0, 1500], [0.25, 2200], [0.5, 3000], [0.9, 4500], [1, 6000]],
    # short assistant tool-call turns in the history
    "history_assistant_knots": [[0, 20], [0.5, 60], [0.9, 150], [1, 300]],
    # long-tailed tool observations (file contents, search results, logs)
    "observation_knots": [[0, 40], [0.25, 150], [0.5, 400], [0.75, 900], [0.95, 2000], [1, 3000]],
    # the new call is one short tool call or answer
    "completion_knots": [[0, 16], [0.5, 64], [0.9, 160], [1, 256]],
    "tool_latency_s": 0.0,
    "length_correlation": 0.3,
    "max_model_len": DEFAULT_MAX_MODEL_LEN,
}


def _count(gen: str, knobs: dict, key: str, default: int, minimum: int) -> int:
    v = int(knobs.get(key, default))
    if v < minimum:
        raise ValueError(f"{gen}: knob {key}={v} must be >= {minimum}")
    return v


def agentic_workload(name: str, namespace: str, groups: int, seed: int, n: int, knobs: dict[str, Any],
                     salted: bool) -> Workload:
    """The shared agentic shape; ``namespace`` names the random streams (see module docstring)."""
    history = _count(name, knobs, "history_turns", 0, 0)
    calls = _count(name, knobs, "calls", 1, 1)
    max_model_len = _count(name, knobs, "max_model_len", DEFAULT_MAX_MODEL_LEN, 2)
    rho = float(knobs["length_correlation"])
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"{name}: knob length_correlation={rho} must lie in [0, 1)")
    latency_s = float(knobs.get("tool_latency_s", 0.0))
    if not (np.isfinite(latency_s) and latency_s >= 0):
        raise ValueError(f"{name}: knob tool_latency_s={latency_s} must be finite and >= 0")
    system_q = dist(f"{name}.system_knots", knobs["system_knots"])
    completion_q = dist(f"{name}.completion_knots", knobs["completion_knots"])
    st = Streams(seed, namespace)

    G, T = groups, groups * n
    gi = np.arange(G, dtype=np.int64)
    first = system_q.sample(st.uniform("system", gi))
    if history:
        assistant_q = dist(f"{name}.history_assistant_knots", knobs["history_assistant_knots"])
        for h in range(history):
            first = first + assistant_q.sample(st.uniform("history_assistant", gi, 0, h))
    g, s = grid(G, n)
    new = np.zeros((T, calls), dtype=np.int64)
    if history or calls > 1:
        obs_q = dist(f"{name}.observation_knots", knobs["observation_knots"], minimum=0)
        for h in range(history):
            first = first + obs_q.sample(st.uniform("history_observation", gi, 0, h))
        for j in range(1, calls):
            new[:, j] = obs_q.sample(st.uniform("observation", g, s, j)).reshape(T)
    difficulty_z = st.normal("difficulty", gi)[:, None]
    completion = np.empty((T, calls), dtype=np.int64)
    for j in range(calls):
        u = st.correlated_uniform("completion", difficulty_z, g, s, rho, turn=j)
        completion[:, j] = completion_q.sample(u).reshape(T)
    prompt, new, completion = fit_context(np.repeat(first, n), new, completion, max_model_len)
    latency = np.zeros((T, calls), dtype=np.float64)
    latency[:, :-1] = latency_s  # the tool runs between calls; the benchmark scores instantly
    pass_rate = 0.2 + 0.6 * st.uniform("pass_rate", gi)
    reward = synthetic_rewards(st, pass_rate, n, zero_variance_fraction=0.0)
    return assemble(name, seed, dict(knobs), n, first, prompt, new, completion, latency,
                    np.full((T, calls), salted), reward)


def _multi_turn(groups, seed, n, knobs):
    return agentic_workload("multi_turn", "multi_turn", groups, seed, n, knobs, salted=False)


def _multi_turn_salted(groups, seed, n, knobs):
    return agentic_workload("multi_turn_salted", "multi_turn", groups, seed, n, knobs, salted=True)


def _long_generation(groups, seed, n, knobs):
    return agentic_workload("long_generation", "long_generation", groups, seed, n, knobs, salted=False)


def _tool_history(groups, seed, n, knobs):
    return agentic_workload("tool_history", "tool_history", groups, seed, n, knobs, salted=False)


SPECS = (
    GeneratorSpec("multi_turn", _multi_turn, 4, MULTI_TURN_KNOBS,
                  "4/group; 2 historical turns in the first prompt, 3 new calls with tool observations",
                  min_group_size=2),
    GeneratorSpec("long_generation", _long_generation, 4, LONG_GENERATION_KNOBS,
                  "4/group; one call, forced completions 512-4096", min_group_size=2),
    GeneratorSpec("tool_history", _tool_history, 8, TOOL_HISTORY_KNOBS,
                  "8/group; 6 historical turns and a large tool schema, one short new call",
                  min_group_size=2),
    GeneratorSpec("multi_turn_salted", _multi_turn_salted, 4, MULTI_TURN_KNOBS,
                  "multi_turn's exact token schedule with call_cache_salted on every call",
                  min_group_size=2),
)
