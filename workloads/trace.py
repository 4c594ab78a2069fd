"""The joint grouped workload trace: versioned JSONL, one prompt group per line.

`write_trace(workload, path)` writes atomically (a temporary file in the same folder, then
`os.replace`); `read_trace(path)` parses and validates, raising `TraceError` that names the file,
the line, the field and what was expected. Structure is checked per record while reading;
values are checked afterwards on the flat arrays with numpy (fast for 100,000-group traces) and
the first bad value is mapped back to its line. The format is documented in workloads/README.md.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from workloads.types import Workload

TRACE_SCHEMA = "simrl.trace.v1"
_CALL_LISTS = ("prompt_tokens", "new_tokens", "completion_tokens", "tool_latency_s", "cache_salted")


class TraceError(ValueError):
    """A malformed trace: ``path``, 1-based ``line`` (0 for the whole file) and ``field``."""

    def __init__(self, path, line: int, field: str | None, message: str):
        self.path, self.line, self.field = str(path), line, field
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {field + ': ' if field else ''}{message}")


def uniform_group_size(workload: Workload) -> int | None:
    """The common trajectories-per-group, or None when groups differ."""
    sizes = np.diff(workload.group_traj_start)
    return int(sizes[0]) if len(sizes) and np.all(sizes == sizes[0]) else None


def header_record(workload: Workload) -> dict:
    """The first line of a trace: schema, provenance and what a reader should verify."""
    mml = workload.knobs.get("max_model_len")
    return {
        "schema": TRACE_SCHEMA,
        "name": workload.name,
        "seed": int(workload.seed),
        "groups": workload.n_groups,
        "group_size": uniform_group_size(workload),
        "max_model_len": int(mml) if isinstance(mml, int) else None,
        "knobs": workload.knobs,
        "schedule_sha256": workload.schedule_sha256(),
    }


def _optional_columns(workload: Workload) -> tuple[bool, bool]:
    """Whether the trace carries tool_latency_s / cache_salted lists (only when any is non-default)."""
    return bool(np.any(workload.call_tool_latency_s)), bool(np.any(workload.call_cache_salted))


def group_records(workload: Workload):
    """One JSON-ready dict per group, in order (the readable reference form of `group_lines`)."""
    with_lat, with_salt = _optional_columns(workload)
    gts, tcs = workload.group_traj_start.tolist(), workload.traj_call_start.tolist()
    reward, shared = workload.traj_reward.tolist(), workload.group_shared_prompt_tokens.tolist()
    cols = {k: getattr(workload, "call_" + k).tolist() for k in _CALL_LISTS}
    for g in range(workload.n_groups):
        trajs = []
        for t in range(gts[g], gts[g + 1]):
            a, b = tcs[t], tcs[t + 1]
            rec = {"reward": reward[t]}
            for k in ("prompt_tokens", "new_tokens", "completion_tokens"):
                rec[k] = cols[k][a:b]
            if with_lat:
                rec["tool_latency_s"] = cols["tool_latency_s"][a:b]
            if with_salt:
                rec["cache_salted"] = cols["cache_salted"][a:b]
            trajs.append(rec)
        yield {"group": g, "shared_prompt_tokens": shared[g], "trajectories": trajs}


def _trajectory_texts(workload: Workload) -> list[str]:
    """Every trajectory as JSON text; one %-format per distinct call count (json.dumps was the
    bottleneck of writing 100,000-group traces)."""
    with_lat, with_salt = _optional_columns(workload)
    calls = np.diff(workload.traj_call_start)
    out: list[str] = [""] * workload.n_trajectories
    salt_text = np.where(workload.call_cache_salted, "true", "false")
    for k in np.unique(calls).tolist():
        trajs = np.flatnonzero(calls == k)
        idx = workload.traj_call_start[trajs][:, None] + np.arange(k)[None, :]  # [t, k] call rows
        ints = ",".join(["%d"] * k)
        fmt = '{"reward":%r,"prompt_tokens":[' + ints + '],"new_tokens":[' + ints + '],"completion_tokens":[' + ints + "]"
        columns = [workload.traj_reward[trajs].tolist()]
        for arr in (workload.call_prompt_tokens, workload.call_new_tokens, workload.call_completion_tokens):
            columns += arr[idx].T.tolist()
        if with_lat:
            fmt += ',"tool_latency_s":[' + ",".join(["%r"] * k) + "]"
            columns += workload.call_tool_latency_s[idx].T.tolist()
        if with_salt:
            fmt += ',"cache_salted":[' + ",".join(["%s"] * k) + "]"
            columns += salt_text[idx].T.tolist()
        fmt += "}"
        for t, row in zip(trajs.tolist(), zip(*columns, strict=True), strict=True):
            out[t] = fmt % row
    return out


def group_lines(workload: Workload):
    """The group records as compact JSON text, one line each (same content as `group_records`)."""
    if not np.all(np.isfinite(workload.traj_reward)):
        raise ValueError(f"workload {workload.name!r}: rewards must be finite to be written as JSON")
    texts = _trajectory_texts(workload)
    gts, shared = workload.group_traj_start.tolist(), workload.group_shared_prompt_tokens.tolist()
    for g in range(workload.n_groups):
        body = ",".join(texts[gts[g]:gts[g + 1]])
        yield f'{{"group":{g},"shared_prompt_tokens":{shared[g]},"trajectories":[{body}]}}'


def write_trace(workload: Workload, path) -> Path:
    """Write ``workload`` as a trace at ``path`` atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(header_record(workload), separators=(",", ":")) + "\n")
            for text in group_lines(workload):
                fh.write(text + "\n")
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class _Flat:
    """Flat call/trajectory lists gathered while reading, with where each row came from."""

    def __init__(self):
        self.cols: dict[str, list] = {k: [] for k in _CALL_LISTS}
        self.has_new: list[bool] = []
        self.reward: list = []
        self.traj_start = [0]
        self.group_start = [0]
        self.shared: list = []
        self.group_line: list[int] = []


def _header(path, line: int, rec: dict) -> dict:
    if rec.get("schema") != TRACE_SCHEMA:
        raise TraceError(path, line, "schema", f"expected {TRACE_SCHEMA!r}, got {rec.get('schema')!r}")
    for key, kind in (("name", str), ("seed", int), ("groups", int), ("group_size", int),
                      ("max_model_len", int), ("knobs", dict), ("schedule_sha256", str)):
        v = rec.get(key)
        if v is not None and (not isinstance(v, kind) or isinstance(v, bool)):
            raise TraceError(path, line, key, f"expected {kind.__name__} or null, got {v!r}")
    return rec


def _group(path, line: int, rec, flat: _Flat, header: dict) -> None:
    if not isinstance(rec, dict):
        raise TraceError(path, line, None, f"expected a JSON object (one group), got {type(rec).__name__}")
    g = len(flat.shared)
    if "group" in rec and rec["group"] != g:
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
    flat.shared.append(rec.get("shared_prompt_tokens", 0))
    flat.group_line.append(line)
    cols = flat.cols
    prompt_col, comp_col, new_col = cols["prompt_tokens"], cols["completion_tokens"], cols["new_tokens"]
    lat_col, salt_col = cols["tool_latency_s"], cols["cache_salted"]
    for k, traj in enumerate(trajs):
        # Fast path for the common well-formed record; anything odd gets a precise diagnosis.
        p = traj.get("prompt_tokens") if type(traj) is dict else None
        c = traj.get("completion_tokens") if p is not None else None
        n = len(p) if type(p) is list else 0
        new, lat, salt = traj.get("new_tokens"), traj.get("tool_latency_s"), traj.get("cache_salted")
        if not (n and type(c) is list and len(c) == n and (new is None or (type(new) is list and len(new) == n))
                and (lat is None or (type(lat) is list and len(lat) == n))
                and (salt is None or (type(salt) is list and len(salt) == n))):
            _diagnose_trajectory(path, line, k, traj)
        prompt_col.extend(p)
        comp_col.extend(c)
        new_col.extend([-1] * n if new is None else new)
        lat_col.extend([0.0] * n if lat is None else lat)
        salt_col.extend([False] * n if salt is None else salt)
        flat.has_new.extend([new is not None] * n)
        flat.reward.append(traj.get("reward", 0.0))
        flat.traj_start.append(len(prompt_col))
    flat.group_start.append(len(flat.reward))


def _diagnose_trajectory(path, line: int, k: int, traj) -> None:
    """Raise the TraceError describing what is wrong with one trajectory record."""
    if not isinstance(traj, dict):
        raise TraceError(path, line, f"trajectories[{k}]", f"expected an object, got {traj!r}")
    n = None
    for key in _CALL_LISTS:
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


def _locate(path, flat: _Flat, call: int | None, traj: int | None, field: str, message: str):
    """A TraceError at the line and trajectory/call of a flat call (or trajectory) index."""
    ts, gs = np.asarray(flat.traj_start), np.asarray(flat.group_start)
    if call is not None:
        traj = int(np.searchsorted(ts, call, side="right") - 1)
    g = int(np.searchsorted(gs, traj, side="right") - 1)
    name = f"trajectories[{traj - gs[g]}].{field}" + (f"[{call - ts[traj]}]" if call is not None else "")
    return TraceError(path, flat.group_line[g], name, message)


def _typed(path, flat: _Flat, values: list, field: str, ok: tuple, expected: str, per_call: bool = True):
    if set(map(type, values)) <= set(ok):
        return
    i = next(i for i, v in enumerate(values) if type(v) not in ok)
    raise _locate(path, flat, i if per_call else None, None if per_call else i, field,
                  f"expected {expected}, got {values[i]!r}")


def _check_values(path, flat: _Flat, max_model_len: int | None) -> dict:
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
    bad(~np.isfinite(lat) | (lat < 0), "tool_latency_s", "finite seconds >= 0", lat)
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


def _check_shared(path, flat: _Flat, prompt: np.ndarray) -> np.ndarray:
    for g, v in enumerate(flat.shared):
        if type(v) is not int or v < 0:
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


def read_trace(path, max_model_len: int | None = None) -> Workload:
    """Parse and validate a trace; ``max_model_len`` (else the header's) bounds prompt + completion."""
    path = Path(path)
    header: dict = {}
    header_line = 0
    flat = _Flat()
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise TraceError(path, 0, None, f"cannot open: {exc.strerror or exc}") from exc
    with fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceError(path, line, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
            if isinstance(rec, dict) and "schema" in rec:
                if flat.shared or header:
                    raise TraceError(path, line, "schema", "a header record may only be the first line")
                header, header_line = _header(path, line, rec), line
                continue
            _group(path, line, rec, flat, header)
    if not flat.shared:
        raise TraceError(path, 0, None, "no group records: expected one JSON object per group")
    if header.get("groups") is not None and header["groups"] != len(flat.shared):
        raise TraceError(path, header_line, "groups", f"header declares {header['groups']} groups, file has {len(flat.shared)}")
    limit = max_model_len if max_model_len is not None else header.get("max_model_len")
    cols = _check_values(path, flat, limit)
    shared = _check_shared(path, flat, cols["prompt"])
    workload = Workload(
        name=header.get("name") or path.stem,
        seed=header.get("seed") or 0,
        group_traj_start=flat.group_start,
        traj_call_start=flat.traj_start,
        traj_reward=cols["reward"],
        group_shared_prompt_tokens=shared,
        call_prompt_tokens=cols["prompt"],
        call_new_tokens=cols["new"],
        call_completion_tokens=cols["completion"],
        call_tool_latency_s=cols["latency"],
        call_cache_salted=np.asarray(flat.cols["cache_salted"], bool),
        knobs=header.get("knobs") or {},
    )
    want = header.get("schedule_sha256")
    if want is not None and want != workload.schedule_sha256():
        raise TraceError(path, header_line, "schedule_sha256", f"header says {want}, the groups hash to "
                                                      f"{workload.schedule_sha256()} (edited or truncated?)")
    return workload
