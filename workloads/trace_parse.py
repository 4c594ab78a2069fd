"""Parsing and validation of trace records (the reading half of `workloads.trace`).

Structure is checked per record while gathering the flat call and trajectory lists (a
whole-group fast path, a per-trajectory path that diagnoses any odd record); values are then
checked on numpy arrays, and the first bad value is mapped back to its file line, trajectory and
call, so every `TraceError` names the file, line and field and says what was expected.
"""

from __future__ import annotations

from itertools import accumulate, chain

import numpy as np

from workloads import strictio

TRACE_SCHEMA = "simrl.trace.v1"
CALL_LISTS = ("prompt_tokens", "new_tokens", "completion_tokens", "tool_latency_s", "cache_salted")
# Bounds far beyond any real call, so that sums of tokens can never overflow int64 and a typo
# (an extra digit group) is an error rather than a run that never ends.
MAX_TOKENS = 2**40
MAX_LATENCY_S = 1e9


class TraceError(ValueError):
    """A malformed trace: ``path``, 1-based ``line`` (0 for the whole file) and ``field``."""

    def __init__(self, path, line: int, field: str | None, message: str):
        self.path, self.line, self.field = str(path), line, field
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {field + ': ' if field else ''}{message}")


def json_lines(path):
    """Yield ``(line_number, record)`` for every non-blank line of a JSONL file.

    Decoding is strict (`workloads.strictio`): a file that cannot be opened, bytes that are not
    UTF-8, a line that is not JSON, a duplicate key, NaN/Infinity or an integer outside 64 bits
    raise `TraceError` naming the file and line.
    """
    return strictio.json_lines(path, lambda line, field, msg: TraceError(path, line, field, msg))


HEADER_FIELDS = ("schema", "name", "seed", "groups", "group_size", "max_model_len", "knobs", "schedule_sha256")
GROUP_FIELDS = ("group", "shared_prompt_tokens", "trajectories")
TRAJECTORY_FIELDS = ("reward", *CALL_LISTS)


def _check_fields(path, line: int, rec: dict, known, prefix: str = "") -> None:
    try:
        strictio.check_fields(rec, known, prefix)
    except strictio.StrictInputError as exc:
        raise TraceError(path, line, exc.field, exc.message) from None


class Gathered:
    """Flat call/trajectory lists gathered while reading, with where each row came from."""

    def __init__(self):
        self.cols: dict[str, list] = {k: [] for k in CALL_LISTS}
        self.has_new: list[bool] = []
        self.reward: list = []
        self.traj_start = [0]
        self.group_start = [0]
        self.shared: list = []
        self.group_line: list[int] = []


def parse_header(path, line: int, rec: dict) -> dict:
    if rec.get("schema") != TRACE_SCHEMA:
        raise TraceError(path, line, "schema", f"expected {TRACE_SCHEMA!r}, got {rec.get('schema')!r}")
    _check_fields(path, line, rec, HEADER_FIELDS)
    for key, kind in (("name", str), ("seed", int), ("groups", int), ("group_size", int),
                      ("max_model_len", int), ("knobs", dict), ("schedule_sha256", str)):
        v = rec.get(key)
        if v is not None and (not isinstance(v, kind) or isinstance(v, bool)):
            raise TraceError(path, line, key, f"expected {kind.__name__} or null, got {v!r}")
    _check_header_knobs(path, line, rec.get("knobs") or {}, rec.get("name"))
    return rec


def _check_header_knobs(path, line: int, knobs: dict, name) -> None:
    """The header's knobs as JSON values of their generator's types: the engine reads the drift
    knobs and ``max_model_len`` from them (a string there failed mid-run), and a trace drawn by a
    registered generator carries that generator's knobs only."""
    from workloads.drift import DRIFT_KNOBS, check_drift
    from workloads.registry import _specs, coerce_knob

    spec = _specs().get(name) if isinstance(name, str) else None
    defaults = {**(spec.knobs if spec is not None else {}), **DRIFT_KNOBS, "max_model_len": 1}
    if spec is not None:
        for k in knobs:
            if k not in defaults:
                raise TraceError(path, line, f"knobs.{k}", strictio.unknown_field_message(k, defaults)
                                 .replace("unknown field", f"not a knob of generator {name!r}:", 1))
    for k, v in knobs.items():
        d = defaults.get(k)
        if d is None or (v is None and k == "max_model_len"):
            continue
        if isinstance(d, bool):
            kinds, what = (bool,), "true or false"
        elif isinstance(d, list):
            kinds, what = (list,), "a list"
        elif isinstance(d, int | float):
            kinds, what = ((int,), "an integer") if k == "max_model_len" else ((int, float), "a number")
        else:
            continue
        if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds):
            raise TraceError(path, line, f"knobs.{k}", f"expected {what}, got {v!r:.40}")
    if "max_model_len" in knobs and knobs["max_model_len"] is not None and knobs["max_model_len"] < 1:
        raise TraceError(path, line, "knobs.max_model_len", f"expected an integer >= 1, got {knobs['max_model_len']}")
    try:
        check_drift("knobs", {k: v for k, v in knobs.items() if k in DRIFT_KNOBS}, coerce_knob)
    except ValueError as exc:
        raise TraceError(path, line, "knobs", str(exc)) from None


_GROUP_SET, _TRAJECTORY_SET = frozenset(GROUP_FIELDS), frozenset(TRAJECTORY_FIELDS)


def gather_group(path, line: int, rec, flat: Gathered, header: dict) -> None:
    if not isinstance(rec, dict):
        raise TraceError(path, line, None, f"expected a JSON object (one group), got {type(rec).__name__}")
    if not rec.keys() <= _GROUP_SET:
        _check_fields(path, line, rec, GROUP_FIELDS)
    g = len(flat.shared)
    if "group" in rec and (type(rec["group"]) is not int or rec["group"] != g):
        raise TraceError(path, line, "group", f"expected group index {g} (groups are numbered in order), "
                                              f"got {rec['group']!r}")
    trajs = rec.get("trajectories")
    if not isinstance(trajs, list):
        what = "missing" if trajs is None else f"got {type(trajs).__name__}"
        raise TraceError(path, line, "trajectories", f"expected a list of trajectories, {what}")
    if not trajs:
        raise TraceError(path, line, "trajectories", "empty group: expected at least one trajectory")
    size = header.get("group_size")
    if size is not None and len(trajs) != size:
        raise TraceError(path, line, "trajectories",
                         f"header declares group_size={size}, this group has {len(trajs)} trajectories")
    try:
        keys = set().union(*map(dict.keys, trajs))
    except TypeError:  # a trajectory that is not an object: diagnosed below
        keys = set().union(*(t.keys() for t in trajs if type(t) is dict))
    if not keys <= _TRAJECTORY_SET:
        for k, t in enumerate(trajs):
            if type(t) is dict:
                _check_fields(path, line, t, TRAJECTORY_FIELDS, f"trajectories[{k}].")
    flat.shared.append(rec.get("shared_prompt_tokens", 0))
    flat.group_line.append(line)
    if not _gather_fast(trajs, flat):
        _gather_slow(path, line, trajs, flat)
    flat.group_start.append(len(flat.reward))


def _column(trajs: list, key: str, n_calls: list[int]) -> list | None:
    """Every trajectory's ``key`` list if all are present, lists, and ``n_calls`` long; else None.

    Returns [] when no trajectory has the key (the caller fills defaults).
    """
    values = [t.get(key) for t in trajs]
    if values.count(None) == len(values):
        return []
    if set(map(type, values)) == {list} and list(map(len, values)) == n_calls:
        return values
    return None


def _gather_fast(trajs: list, flat: Gathered) -> bool:
    """Gather a well-formed group with whole-group comprehensions (no per-trajectory statements).

    Returns False, touching nothing, when the group needs the per-trajectory path.
    """
    if set(map(type, trajs)) != {dict}:
        return False
    prompts = [t.get("prompt_tokens") for t in trajs]
    if set(map(type, prompts)) != {list}:
        return False
    n_calls = list(map(len, prompts))
    if 0 in n_calls:
        return False
    comps = _column(trajs, "completion_tokens", n_calls)
    cols = {k: _column(trajs, k, n_calls) for k in ("new_tokens", "tool_latency_s", "cache_salted")}
    if not comps or any(v is None for v in cols.values()):
        return False
    total = sum(n_calls)
    c = flat.cols
    for key, fill in (("new_tokens", -1), ("tool_latency_s", 0.0), ("cache_salted", False)):
        if cols[key]:
            c[key].extend(chain.from_iterable(cols[key]))
        else:
            c[key].extend([fill] * total)
    c["prompt_tokens"].extend(chain.from_iterable(prompts))
    c["completion_tokens"].extend(chain.from_iterable(comps))
    flat.has_new.extend([bool(cols["new_tokens"])] * total)
    flat.reward.extend([t.get("reward", 0.0) for t in trajs])
    flat.traj_start.extend(accumulate(n_calls, initial=flat.traj_start[-1]))
    del flat.traj_start[-len(n_calls) - 1]  # accumulate repeats the starting offset
    return True


def _gather_slow(path, line: int, trajs: list, flat: Gathered) -> None:
    """Gather a group one trajectory at a time (mixed optional fields), diagnosing any bad record."""
    cols = flat.cols
    for k, traj in enumerate(trajs):
        if type(traj) is not dict:
            _diagnose_trajectory(path, line, k, traj)  # names trajectories[k]: expected an object
        p = traj.get("prompt_tokens") if type(traj) is dict else None
        c = traj.get("completion_tokens") if p is not None else None
        n = len(p) if type(p) is list else 0
        new, lat, salt = traj.get("new_tokens"), traj.get("tool_latency_s"), traj.get("cache_salted")
        if not (n and type(c) is list and len(c) == n and (new is None or (type(new) is list and len(new) == n))
                and (lat is None or (type(lat) is list and len(lat) == n))
                and (salt is None or (type(salt) is list and len(salt) == n))):
            _diagnose_trajectory(path, line, k, traj)
        cols["prompt_tokens"].extend(p)
        cols["completion_tokens"].extend(c)
        cols["new_tokens"].extend([-1] * n if new is None else new)
        cols["tool_latency_s"].extend([0.0] * n if lat is None else lat)
        cols["cache_salted"].extend([False] * n if salt is None else salt)
        flat.has_new.extend([new is not None] * n)
        flat.reward.append(traj.get("reward", 0.0))
        flat.traj_start.append(len(cols["prompt_tokens"]))


def _diagnose_trajectory(path, line: int, k: int, traj) -> None:
    """Raise the TraceError describing what is wrong with one trajectory record."""
    if not isinstance(traj, dict):
        raise TraceError(path, line, f"trajectories[{k}]", f"expected an object, got {traj!r}")
    n = None
    for key in CALL_LISTS:
        v = traj.get(key)
        if v is None:
            if key in ("prompt_tokens", "completion_tokens"):
                raise TraceError(path, line, f"trajectories[{k}].{key}", "missing (a list, one entry per call)")
            continue
        if not isinstance(v, list) or not v:
            raise TraceError(path, line, f"trajectories[{k}].{key}", f"expected a non-empty list, got {v!r}")
        if n is None:
            n = len(v)
        elif len(v) != n:
            raise TraceError(path, line, f"trajectories[{k}].{key}",
                             f"has {len(v)} entries, expected {n} (one per call)")
    raise TraceError(path, line, f"trajectories[{k}]", "malformed trajectory record")


def _locate(path, flat: Gathered, call: int | None, traj: int | None, field: str, message: str):
    """A TraceError at the line and trajectory/call of a flat call (or trajectory) index."""
    ts, gs = np.asarray(flat.traj_start), np.asarray(flat.group_start)
    if call is not None:
        traj = int(np.searchsorted(ts, call, side="right") - 1)
    g = int(np.searchsorted(gs, traj, side="right") - 1)
    name = f"trajectories[{traj - gs[g]}].{field}" + (f"[{call - ts[traj]}]" if call is not None else "")
    return TraceError(path, flat.group_line[g], name, message)


def _typed(path, flat: Gathered, values: list, field: str, ok: tuple, expected: str, per_call: bool = True):
    if set(map(type, values)) <= set(ok):
        return
    i = next(i for i, v in enumerate(values) if type(v) not in ok)
    raise _locate(path, flat, i if per_call else None, None if per_call else i, field,
                  f"expected {expected}, got {values[i]!r}")


def check_values(path, flat: Gathered, max_model_len: int | None) -> dict:
    """Vectorised value checks; returns the numpy columns (new_tokens filled in)."""
    c = flat.cols
    for key in ("prompt_tokens", "new_tokens", "completion_tokens"):
        _typed(path, flat, c[key], key, (int,), "an integer")
    _typed(path, flat, c["tool_latency_s"], "tool_latency_s", (int, float), "a number of seconds")
    _typed(path, flat, c["cache_salted"], "cache_salted", (bool,), "true or false")
    _typed(path, flat, flat.reward, "reward", (int, float), "a number", per_call=False)
    prompt, comp = np.asarray(c["prompt_tokens"], np.int64), np.asarray(c["completion_tokens"], np.int64)
    new, lat = np.asarray(c["new_tokens"], np.int64), np.asarray(c["tool_latency_s"], np.float64)
    has_new = np.asarray(flat.has_new, bool)
    reward = np.asarray(flat.reward, np.float64)

    def bad(mask, field, expected, values, per_call=True):
        idx = np.flatnonzero(mask)
        if len(idx):
            i = int(idx[0])
            raise _locate(path, flat, i if per_call else None, None if per_call else i, field,
                          f"expected {expected}, got {values[i]}")

    bad(prompt < 1, "prompt_tokens", "an integer >= 1", prompt)
    bad(comp < 1, "completion_tokens", "an integer >= 1", comp)
    bad(has_new & (new < 0), "new_tokens", "an integer >= 0", new)
    for key, col in (("prompt_tokens", prompt), ("completion_tokens", comp), ("new_tokens", new)):
        bad(col > MAX_TOKENS, key, f"at most 2**40 = {MAX_TOKENS} tokens", col)
    bad(~np.isfinite(lat) | (lat < 0), "tool_latency_s", "finite seconds >= 0", lat)
    bad(lat > MAX_LATENCY_S, "tool_latency_s", f"at most {MAX_LATENCY_S:g} seconds", lat)
    bad(~np.isfinite(reward), "reward", "a finite number", reward, per_call=False)
    first = np.zeros(len(prompt), bool)
    first[np.asarray(flat.traj_start[:-1], np.int64)] = True
    derived = prompt.copy()
    derived[1:] -= prompt[:-1] + comp[:-1]
    derived[first] = prompt[first]
    bad(has_new & (new != derived), "new_tokens",
        "prompt_tokens[j] - prompt_tokens[j-1] - completion_tokens[j-1] (prompt_tokens on the first call)",
        new)
    bad(~has_new & (derived < 0), "prompt_tokens",
        "a prompt that extends the previous call's prompt + completion", prompt)
    if max_model_len is not None:
        bad(prompt + comp > max_model_len, "completion_tokens",
            f"prompt_tokens + completion_tokens <= max_model_len={max_model_len}", prompt + comp)
    return {"prompt": prompt, "new": derived, "completion": comp, "latency": lat, "reward": reward}


def check_shared(path, flat: Gathered, prompt: np.ndarray) -> np.ndarray:
    for g, v in enumerate(flat.shared):
        if type(v) is not int or not 0 <= v <= MAX_TOKENS:
            raise TraceError(path, flat.group_line[g], "shared_prompt_tokens", f"expected an integer >= 0, got {v!r}")
    shared = np.asarray(flat.shared, np.int64)
    gs = np.asarray(flat.group_start, np.int64)
    first_prompt = prompt[np.asarray(flat.traj_start[:-1], np.int64)]
    shortest = np.minimum.reduceat(first_prompt, gs[:-1])
    over = np.flatnonzero(shared > shortest)
    if len(over):
        g = int(over[0])
        raise TraceError(path, flat.group_line[g], "shared_prompt_tokens",
                         f"expected at most the shortest first prompt ({shortest[g]}), got {shared[g]}")
    return shared
