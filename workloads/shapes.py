"""Shared building blocks of the generators: rewards, context fitting and array assembly.

Generators draw dense arrays (groups x samples x turns) and hand them here. `fit_context`
forces every call to fit ``max_model_len``; `synthetic_rewards` draws 0/1 rewards with a
per-group pass rate and a controlled fraction of zero-variance groups; `assemble` flattens the
dense arrays into the ragged CSR `Workload` without any per-group Python loop.
"""

from __future__ import annotations

import numpy as np

from workloads.sampling import Streams
from workloads.types import Workload

DEFAULT_MAX_MODEL_LEN = 32768


def grid(groups: int, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Group and sample index arrays of shape [groups, group_size]."""
    g = np.arange(groups, dtype=np.int64)[:, None]
    s = np.arange(group_size, dtype=np.int64)[None, :]
    return np.broadcast_to(g, (groups, group_size)), np.broadcast_to(s, (groups, group_size))


def synthetic_rewards(streams: Streams, pass_rate: np.ndarray, group_size: int,
                      zero_variance_fraction: float) -> np.ndarray:
    """0/1 rewards [G, n]: sample s of group g passes when its uniform falls below ``pass_rate[g]``.

    A ``zero_variance_fraction`` of groups (their own stream decides which) are all-pass when
    ``pass_rate >= 0.5`` and all-fail otherwise. Every other group with n >= 2 is forced to vary:
    if its draws came out all equal, the sample nearest the threshold flips, so the spread is
    guaranteed rather than merely likely (ART drops zero-variance groups).
    """
    G = len(pass_rate)
    g, s = grid(G, group_size)
    u = streams.uniform("reward", g, s)
    p = np.asarray(pass_rate, dtype=np.float64)[:, None]
    passed = u < p
    if group_size >= 2:
        all_pass = passed.all(axis=1)
        all_fail = ~passed.any(axis=1)
        rows = np.nonzero(all_fail)[0]
        passed[rows, np.argmin(u[rows], axis=1)] = True
        rows = np.nonzero(all_pass)[0]
        passed[rows, np.argmax(u[rows], axis=1)] = False
    zero_var = streams.uniform("zero_variance_group", np.arange(G)) < zero_variance_fraction
    passed[zero_var] = (p[zero_var] >= 0.5)
    return passed.astype(np.float64)


def fit_context(prompt0: np.ndarray, new: np.ndarray, completion: np.ndarray,
                max_model_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Force every call of [T, K] trajectories to fit: prompt_j + completion_j <= max_model_len.

    ``prompt0`` [T] is the first prompt, ``new`` [T, K] the tokens appended before each later call
    (column 0 ignored) and ``completion`` [T, K] the forced completion lengths. Later observations
    are truncated first (an environment truncates long tool output), then completions, always
    leaving one token for each remaining call. Returns (prompt, new, completion) [T, K].
    """
    T, K = completion.shape
    prompt0 = np.asarray(prompt0, dtype=np.int64)
    if np.any(prompt0 + K > max_model_len):
        worst = int(prompt0.max())
        raise ValueError(f"max_model_len={max_model_len} cannot hold a {worst}-token first prompt plus "
                         f"{K} completion token(s); raise max_model_len or shorten the prompt knots")
    prompt = np.empty((T, K), dtype=np.int64)
    new_out = np.empty((T, K), dtype=np.int64)
    comp_out = np.empty((T, K), dtype=np.int64)
    context = np.zeros(T, dtype=np.int64)
    for j in range(K):
        later_calls = K - j - 1
        if j == 0:
            add = prompt0
        else:
            add = np.minimum(new[:, j], max_model_len - 1 - later_calls - context)
        new_out[:, j] = add
        prompt[:, j] = context + add
        comp_out[:, j] = np.minimum(completion[:, j], max_model_len - later_calls - prompt[:, j])
        context = prompt[:, j] + comp_out[:, j]
    return prompt, new_out, comp_out


def assemble(name: str, seed: int, knobs: dict, group_size: int, shared: np.ndarray,
             prompt: np.ndarray, new: np.ndarray, completion: np.ndarray, latency: np.ndarray,
             salted: np.ndarray, reward: np.ndarray) -> Workload:
    """Flatten dense arrays (G groups of ``group_size`` trajectories of K calls) into a `Workload`.

    ``shared`` is [G]; ``prompt``, ``new``, ``completion``, ``latency``, ``salted`` are [T, K] with
    T = G * group_size; ``reward`` is [T]. ``shared`` is clipped to the group's shortest first
    prompt so the shared prefix is never longer than any sample's prompt.
    """
    T, K = prompt.shape
    G = T // group_size
    first = prompt[:, 0].reshape(G, group_size).min(axis=1)
    return Workload(
        name=name,
        seed=seed,
        group_traj_start=np.arange(G + 1, dtype=np.int64) * group_size,
        traj_call_start=np.arange(T + 1, dtype=np.int64) * K,
        traj_reward=np.asarray(reward, dtype=np.float64).reshape(T),
        group_shared_prompt_tokens=np.minimum(np.asarray(shared, dtype=np.int64), first),
        call_prompt_tokens=prompt.reshape(-1),
        call_new_tokens=new.reshape(-1),
        call_completion_tokens=completion.reshape(-1),
        call_tool_latency_s=np.asarray(latency, dtype=np.float64).reshape(-1),
        call_cache_salted=np.asarray(salted, dtype=bool).reshape(-1),
        knobs=knobs,
    )
