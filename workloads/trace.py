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

from workloads.trace_parse import (
    CALL_LISTS,
    TRACE_SCHEMA,
    Gathered,
    TraceError,
    check_shared,
    check_values,
    gather_group,
    json_lines,
    parse_header,
)
from workloads.types import Workload

__all__ = ["TRACE_SCHEMA", "TraceError", "group_lines", "group_records", "header_record", "read_trace",
           "write_trace"]


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
    cols = {k: getattr(workload, "call_" + k).tolist() for k in CALL_LISTS}
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


def read_trace(path, max_model_len: int | None = None) -> Workload:
    """Parse and validate a trace; ``max_model_len`` (else the header's) bounds prompt + completion."""
    path = Path(path)
    header: dict = {}
    header_line = 0
    flat = Gathered()
    for line, rec in json_lines(path):
        if isinstance(rec, dict) and "schema" in rec:
            if flat.shared or header:
                raise TraceError(path, line, "schema", "a header record may only be the first line")
            header, header_line = parse_header(path, line, rec), line
            continue
        gather_group(path, line, rec, flat, header)
    if not flat.shared:
        raise TraceError(path, 0, None, "no group records: expected one JSON object per group")
    if header.get("groups") is not None and header["groups"] != len(flat.shared):
        raise TraceError(path, header_line, "groups", f"header declares {header['groups']} groups, file has {len(flat.shared)}")
    limit = max_model_len if max_model_len is not None else header.get("max_model_len")
    cols = check_values(path, flat, limit)
    shared = check_shared(path, flat, cols["prompt"])
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
