"""RL post-training workloads: `rl_math` (the simulator's default) and `rl_code`.

Both are GRPO-shaped: a group is one prompt sampled ``group_size`` times, the whole prompt is
shared by the group, and completion lengths are long-tailed and correlated within a group
through a per-group latent difficulty (harder prompts think longer and pass less often).
Rewards are 0/1 with a per-group pass rate of 1 - difficulty; a knob sets the fraction of
zero-variance groups. `rl_code` adds optional multi-call repair loops with code-execution
latency. The knots and their reasons are in workloads/README.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workloads.sampling import Streams, dist, normal_cdf
from workloads.shapes import DEFAULT_MAX_MODEL_LEN, assemble, fit_context, grid, synthetic_rewards
from workloads.types import GeneratorSpec, Workload

MATH_KNOBS: dict[str, Any] = {
    # problem statement + instruction/chat template; shared by the group
    "prompt_knots": [[0, 100], [0.25, 170], [0.5, 250], [0.75, 380], [0.95, 650], [1, 1000]],
    # chain-of-thought answers: median 600, p90 2k, p99 4k; the tail past the cap is truncation
    "completion_knots": [[0, 32], [0.1, 170], [0.25, 320], [0.5, 600], [0.75, 1100], [0.9, 2000],
                         [0.95, 2800], [0.99, 4096], [1, 16384]],
    "max_completion": 8192,
    "length_correlation": 0.5,
    "zero_variance_fraction": 0.25,
    "max_model_len": DEFAULT_MAX_MODEL_LEN,
}

CODE_KNOBS: dict[str, Any] = {
    # problem statement, signature, examples and tests
    "prompt_knots": [[0, 150], [0.25, 350], [0.5, 600], [0.75, 1000], [0.95, 2000], [1, 3000]],
    "completion_knots": [[0, 48], [0.1, 250], [0.25, 480], [0.5, 900], [0.75, 1600], [0.9, 2800],
                         [0.95, 3800], [0.99, 6000], [1, 16384]],
    "max_completion": 8192,
    "length_correlation": 0.5,
    "zero_variance_fraction": 0.3,
    "max_model_len": DEFAULT_MAX_MODEL_LEN,
    # model calls per trajectory: 1 = write once; >1 = repair loop fed by execution output
    "calls": 1,
    "feedback_knots": [[0, 20], [0.5, 120], [0.9, 500], [1, 1500]],
    # sandbox time to run the tests after each call, seconds
    "exec_latency_knots": [[0, 0.05], [0.5, 0.4], [0.9, 1.5], [0.99, 5.0], [1, 20.0]],
}


def _unit_interval(gen: str, knobs: dict, key: str, upper_open: bool = False) -> float:
    v = float(knobs[key])
    if not (0.0 <= v < 1.0 if upper_open else 0.0 <= v <= 1.0):
        raise ValueError(f"{gen}: knob {key}={v} must lie in [0, 1{')' if upper_open else ']'}")
    return v


def _positive(gen: str, knobs: dict, key: str) -> int:
    v = int(knobs[key])
    if v < 1:
        raise ValueError(f"{gen}: knob {key}={v} must be >= 1")
    return v


def reasoning_workload(name: str, groups: int, seed: int, n: int, knobs: dict[str, Any]) -> Workload:
    """One prompt per group, ``calls`` calls per trajectory, correlated long-tailed completions."""
    rho = _unit_interval(name, knobs, "length_correlation", upper_open=True)
    zero_var = _unit_interval(name, knobs, "zero_variance_fraction")
    max_completion = _positive(name, knobs, "max_completion")
    max_model_len = _positive(name, knobs, "max_model_len")
    calls = _positive(name, knobs, "calls") if "calls" in knobs else 1
    prompt_q = dist(f"{name}.prompt_knots", knobs["prompt_knots"])
    completion_q = dist(f"{name}.completion_knots", knobs["completion_knots"])
    st = Streams(seed, name)

    G, T = groups, groups * n
    gi = np.arange(G, dtype=np.int64)
    prompt = prompt_q.sample(st.uniform("prompt", gi))
    difficulty_z = st.normal("difficulty", gi)
    g, s = grid(G, n)
    completion = np.empty((T, calls), dtype=np.int64)
    new = np.zeros((T, calls), dtype=np.int64)
    latency = np.zeros((T, calls), dtype=np.float64)
    for j in range(calls):
        u = st.correlated_uniform("completion", difficulty_z[:, None], g, s, rho, turn=j)
        completion[:, j] = np.minimum(completion_q.sample(u), max_completion).reshape(T)
    if "feedback_knots" in knobs and calls > 1:
        feedback_q = dist(f"{name}.feedback_knots", knobs["feedback_knots"], minimum=0)
        for j in range(1, calls):
            new[:, j] = feedback_q.sample(st.uniform("feedback", g, s, j)).reshape(T)
    if "exec_latency_knots" in knobs:
        lat_q = dist(f"{name}.exec_latency_knots", knobs["exec_latency_knots"], minimum=0.0, integer=False)
        for j in range(calls):
            latency[:, j] = lat_q.sample(st.uniform("exec_latency", g, s, j)).reshape(T)
    prompts, new, completion = fit_context(np.repeat(prompt, n), new, completion, max_model_len)
    reward = synthetic_rewards(st, 1.0 - normal_cdf(difficulty_z), n, zero_var)
    return assemble(name, seed, dict(knobs), n, prompt, prompts, new, completion, latency,
                    np.zeros((T, calls), dtype=bool), reward)


def _rl_math(groups: int, seed: int, n: int, knobs: dict[str, Any]) -> Workload:
    return reasoning_workload("rl_math", groups, seed, n, knobs)


def _rl_code(groups: int, seed: int, n: int, knobs: dict[str, Any]) -> Workload:
    return reasoning_workload("rl_code", groups, seed, n, knobs)


SPECS = (
    GeneratorSpec("rl_math", _rl_math, 8, MATH_KNOBS,
                  "GRPO math reasoning: one call, group-shared prompt, long-tailed correlated completions"),
    GeneratorSpec("rl_code", _rl_code, 8, CODE_KNOBS,
                  "GRPO code generation: longer prompts, optional repair calls with execution latency"),
)
