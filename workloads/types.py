"""Workload types: prompt group -> trajectory -> call, stored as flat ragged arrays.

A workload is sampled once, up front, from a seed; both simulation engines consume the same
arrays, which is what makes differential testing exact. The arrays are the source of truth;
`Workload.group(g)` gives a readable object view for tests and debugging.

Token accounting of one trajectory's calls (j = 0, 1, ...):

* ``call_prompt_tokens[j]`` is the whole prompt the model sees at call j (history included);
* ``call_new_tokens[j]`` is what was appended since the previous call ended (the observation or
  user turn); for j = 0 it equals the prompt;
* ``call_prompt_tokens[j] == call_prompt_tokens[j-1] + call_completion_tokens[j-1] +
  call_new_tokens[j]`` for j > 0, so a call can reuse the previous call's context as a prefix;
* the first call's first ``group_shared_prompt_tokens[g]`` tokens are identical across the
  group's trajectories (the shared prompt, reusable between samples of one group).

Units: tokens are integers, times are seconds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

SCHEMA = "simrl.workload.v1"


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.int64))


def _f64(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float64))


@attrs.frozen
class CallSpec:
    """One model call, the object view of one row of the call arrays."""

    prompt_tokens: int
    new_tokens: int
    completion_tokens: int
    tool_latency_s: float
    cache_salted: bool


@attrs.frozen
class TrajectorySpec:
    """One sampled trajectory: its calls and its (synthetic) reward."""

    index: int
    calls: tuple[CallSpec, ...]
    reward: float


@attrs.frozen
class GroupSpec:
    """One prompt group: the trajectories sampled for one prompt."""

    index: int
    shared_prompt_tokens: int
    trajectories: tuple[TrajectorySpec, ...]


@attrs.frozen(eq=False)
class Workload:
    """Ragged arrays for G groups, T trajectories and C calls.

    Offsets follow the CSR convention: group g owns trajectories
    ``group_traj_start[g]:group_traj_start[g+1]`` and trajectory t owns calls
    ``traj_call_start[t]:traj_call_start[t+1]``.
    """

    name: str
    seed: int
    group_traj_start: np.ndarray = attrs.field(converter=_i64)  # [G+1] int64
    traj_call_start: np.ndarray = attrs.field(converter=_i64)  # [T+1] int64
    traj_reward: np.ndarray = attrs.field(converter=_f64)  # [T] float64
    group_shared_prompt_tokens: np.ndarray = attrs.field(converter=_i64)  # [G] int64
    call_prompt_tokens: np.ndarray = attrs.field(converter=_i64)  # [C] int64
    call_new_tokens: np.ndarray = attrs.field(converter=_i64)  # [C] int64
    call_completion_tokens: np.ndarray = attrs.field(converter=_i64)  # [C] int64
    call_tool_latency_s: np.ndarray = attrs.field(converter=_f64)  # [C] float64
    call_cache_salted: np.ndarray = attrs.field(
        converter=lambda a: np.ascontiguousarray(np.asarray(a, dtype=bool))
    )  # [C] bool
    knobs: dict = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(f"workload {self.name!r} is inconsistent: " + "; ".join(problems[:5]))

    # -- sizes ---------------------------------------------------------------------------
    @property
    def n_groups(self) -> int:
        return len(self.group_traj_start) - 1

    @property
    def n_trajectories(self) -> int:
        return len(self.traj_call_start) - 1

    @property
    def n_calls(self) -> int:
        return len(self.call_prompt_tokens)

    def group_size(self, g: int) -> int:
        return int(self.group_traj_start[g + 1] - self.group_traj_start[g])

    def traj_calls(self, t: int) -> range:
        return range(int(self.traj_call_start[t]), int(self.traj_call_start[t + 1]))

    def group_trajs(self, g: int) -> range:
        return range(int(self.group_traj_start[g]), int(self.group_traj_start[g + 1]))

    # -- views ---------------------------------------------------------------------------
    def group(self, g: int) -> GroupSpec:
        trajs = []
        for t in self.group_trajs(g):
            calls = tuple(
                CallSpec(
                    int(self.call_prompt_tokens[c]),
                    int(self.call_new_tokens[c]),
                    int(self.call_completion_tokens[c]),
                    float(self.call_tool_latency_s[c]),
                    bool(self.call_cache_salted[c]),
                )
                for c in self.traj_calls(t)
            )
            trajs.append(TrajectorySpec(t, calls, float(self.traj_reward[t])))
        return GroupSpec(g, int(self.group_shared_prompt_tokens[g]), tuple(trajs))

    def take_groups(self, n: int) -> Workload:
        """The first ``n`` groups as a workload of their own."""
        if not 0 < n <= self.n_groups:
            raise ValueError(f"take_groups: n={n} outside 1..{self.n_groups}")
        t_end = int(self.group_traj_start[n])
        c_end = int(self.traj_call_start[t_end])
        return attrs.evolve(
            self,
            group_traj_start=self.group_traj_start[: n + 1],
            traj_call_start=self.traj_call_start[: t_end + 1],
            traj_reward=self.traj_reward[:t_end],
            group_shared_prompt_tokens=self.group_shared_prompt_tokens[:n],
            call_prompt_tokens=self.call_prompt_tokens[:c_end],
            call_new_tokens=self.call_new_tokens[:c_end],
            call_completion_tokens=self.call_completion_tokens[:c_end],
            call_tool_latency_s=self.call_tool_latency_s[:c_end],
            call_cache_salted=self.call_cache_salted[:c_end],
        )

    # -- checks --------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Every structural inconsistency, as readable sentences (empty when valid)."""
        out: list[str] = []
        G, T, C = self.n_groups, self.n_trajectories, self.n_calls
        if G < 0 or self.group_traj_start[0] != 0 or self.group_traj_start[-1] != T:
            out.append(f"group_traj_start must run from 0 to {T}")
        if self.traj_call_start[0] != 0 or self.traj_call_start[-1] != C:
            out.append(f"traj_call_start must run from 0 to {C}")
        if np.any(np.diff(self.group_traj_start) <= 0):
            out.append("every group needs at least one trajectory")
        if np.any(np.diff(self.traj_call_start) <= 0):
            out.append("every trajectory needs at least one call")
        for name in ("traj_reward",):
            if len(getattr(self, name)) != T:
                out.append(f"{name} has {len(getattr(self, name))} rows, expected {T}")
        if len(self.group_shared_prompt_tokens) != G:
            out.append(f"group_shared_prompt_tokens has {len(self.group_shared_prompt_tokens)} rows, expected {G}")
        for name in ("call_new_tokens", "call_completion_tokens", "call_tool_latency_s", "call_cache_salted"):
            if len(getattr(self, name)) != C:
                out.append(f"{name} has {len(getattr(self, name))} rows, expected {C}")
        if out:
            return out
        if np.any(self.call_prompt_tokens < 1):
            out.append("call_prompt_tokens must be >= 1")
        if np.any(self.call_completion_tokens < 1):
            out.append("call_completion_tokens must be >= 1")
        if np.any(self.call_new_tokens < 0):
            out.append("call_new_tokens must be >= 0")
        if np.any(self.call_tool_latency_s < 0) or not np.all(np.isfinite(self.call_tool_latency_s)):
            out.append("call_tool_latency_s must be finite and >= 0")
        first = self.traj_call_start[:-1]
        if np.any(self.call_new_tokens[first] != self.call_prompt_tokens[first]):
            out.append("a trajectory's first call must have new_tokens == prompt_tokens")
        later = np.ones(C, dtype=bool)
        later[first] = False
        idx = np.nonzero(later)[0]
        expect = self.call_prompt_tokens[idx - 1] + self.call_completion_tokens[idx - 1] + self.call_new_tokens[idx]
        if np.any(self.call_prompt_tokens[idx] != expect):
            out.append("prompt_tokens[j] must equal prompt[j-1] + completion[j-1] + new[j]")
        gfirst = first[self.group_traj_start[:-1]]
        if np.any(self.group_shared_prompt_tokens < 0) or np.any(
            self.group_shared_prompt_tokens > self.call_prompt_tokens[gfirst]
        ):
            out.append("group_shared_prompt_tokens must lie in 0..first prompt length")
        return out

    # -- identity ------------------------------------------------------------------------
    def canonical(self) -> dict:
        """The canonical schedule: every (group, sample, turn) length tuple, in order."""
        groups = []
        for g in range(self.n_groups):
            spec = self.group(g)
            groups.append(
                {
                    "shared": spec.shared_prompt_tokens,
                    "trajectories": [
                        [[c.prompt_tokens, c.new_tokens, c.completion_tokens, round(c.tool_latency_s, 9),
                          int(c.cache_salted)] for c in t.calls]
                        for t in spec.trajectories
                    ],
                }
            )
        return {"schema": SCHEMA, "groups": groups}

    def schedule_sha256(self) -> str:
        """SHA-256 of the canonical schedule (lengths, latencies, salting; not rewards)."""
        h = hashlib.sha256()
        h.update(SCHEMA.encode())
        for arr in (
            self.group_traj_start,
            self.traj_call_start,
            self.group_shared_prompt_tokens,
            self.call_prompt_tokens,
            self.call_new_tokens,
            self.call_completion_tokens,
        ):
            h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
        h.update(np.round(self.call_tool_latency_s, 9).astype("<f8").tobytes())
        h.update(self.call_cache_salted.astype(np.uint8).tobytes())
        return h.hexdigest()

    def summary(self) -> dict:
        return {
            "name": self.name,
            "seed": self.seed,
            "groups": self.n_groups,
            "trajectories": self.n_trajectories,
            "calls": self.n_calls,
            "completion_tokens": int(self.call_completion_tokens.sum()),
            "schedule_sha256": self.schedule_sha256(),
        }


def build_workload(name: str, seed: int, groups: list[GroupSpec], knobs: dict | None = None) -> Workload:
    """Pack object-view groups into a `Workload` (used by generators, readers and tests)."""
    gts, tcs = [0], [0]
    rew, shared, pt, nt, ct, lat, salt = [], [], [], [], [], [], []
    for g in groups:
        shared.append(g.shared_prompt_tokens)
        for t in g.trajectories:
            rew.append(t.reward)
            for c in t.calls:
                pt.append(c.prompt_tokens)
                nt.append(c.new_tokens)
                ct.append(c.completion_tokens)
                lat.append(c.tool_latency_s)
                salt.append(c.cache_salted)
            tcs.append(len(pt))
        gts.append(len(rew))
    return Workload(
        name=name,
        seed=seed,
        group_traj_start=gts,
        traj_call_start=tcs,
        traj_reward=rew,
        group_shared_prompt_tokens=shared,
        call_prompt_tokens=pt,
        call_new_tokens=nt,
        call_completion_tokens=ct,
        call_tool_latency_s=lat,
        call_cache_salted=salt,
        knobs=dict(knobs or {}),
    )


def single_turn_group(index: int, n: int, prompt: int, completions: list[int], rewards: list[float] | None = None,
                      shared: bool = True) -> GroupSpec:
    """A group of ``n`` single-call trajectories on one prompt (a common test and RL shape)."""
    if len(completions) != n:
        raise ValueError(f"need {n} completion lengths, got {len(completions)}")
    rewards = rewards if rewards is not None else [float(i % 2) for i in range(n)]
    trajs = tuple(
        TrajectorySpec(i, (CallSpec(prompt, prompt, int(completions[i]), 0.0, False),), float(rewards[i]))
        for i in range(n)
    )
    return GroupSpec(index, prompt if shared else 0, trajs)


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@attrs.frozen
class GeneratorSpec:
    """One registered generator.

    ``build(groups, seed, group_size, knobs) -> Workload`` receives fully resolved knobs (every
    key of ``knobs`` present, coerced to its default's type).
    """

    name: str
    build: Callable[[int, int, int, dict[str, Any]], Workload]
    default_group_size: int
    knobs: dict[str, Any]
    doc: str = ""
    min_group_size: int = 1
