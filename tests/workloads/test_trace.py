"""Trace format: round trip, atomic write, and one rejection test per kind of malformed trace."""

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.registry import generate, generator_names
from workloads.trace import TRACE_SCHEMA, TraceError, group_lines, group_records, read_trace, write_trace

TRAJ = {"reward": 1.0, "prompt_tokens": [100, 130], "new_tokens": [100, 10], "completion_tokens": [20, 5]}


def write_lines(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def group(*trajs, **extra):
    return {"shared_prompt_tokens": 50, "trajectories": [dict(t) for t in (trajs or (TRAJ, TRAJ))], **extra}


@pytest.mark.parametrize("name", generator_names())
def test_round_trip_keeps_the_schedule(tmp_path, name):
    w = generate(name, 30, 5, **({"calls": 2} if name == "rl_code" else {}))
    path = write_trace(w, tmp_path / "sub" / "t.jsonl")
    r = read_trace(path)
    assert r.schedule_sha256() == w.schedule_sha256()
    assert np.array_equal(r.traj_reward, w.traj_reward)
    assert (r.name, r.seed, r.knobs) == (w.name, w.seed, w.knobs)
    assert [p.name for p in path.parent.iterdir()] == ["t.jsonl"]  # no temporary left behind


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(generator_names()), st.integers(1, 12), st.integers(0, 2**40), st.integers(2, 6))
def test_any_generated_workload_survives_a_round_trip(name, groups, seed, size):
    w = generate(name, groups, seed, group_size=size)
    with tempfile.TemporaryDirectory() as d:
        r = read_trace(write_trace(w, Path(d) / "t.jsonl"), max_model_len=w.knobs["max_model_len"])
    assert r.schedule_sha256() == w.schedule_sha256() and np.array_equal(r.traj_reward, w.traj_reward)


def test_fast_writer_matches_reference_records():
    w = generate("rl_code", 20, 1, calls=2)
    w2 = generate("multi_turn_salted", 20, 1)
    for x in (w, w2):
        assert [json.loads(line) for line in group_lines(x)] == list(group_records(x))


def test_minimal_trace_without_header_or_optional_fields(tmp_path):
    path = write_lines(tmp_path / "mini.jsonl", [
        {"trajectories": [{"prompt_tokens": [10, 40], "completion_tokens": [5, 7]}]},
        {"trajectories": [{"prompt_tokens": [9], "completion_tokens": [3], "reward": 1}]},
    ])
    w = read_trace(path)
    assert w.name == "mini" and w.n_groups == 2
    assert w.call_new_tokens.tolist() == [10, 25, 9]
    assert w.traj_reward.tolist() == [0.0, 1.0] and w.group_shared_prompt_tokens.tolist() == [0, 0]


def test_group_mixing_optional_fields_takes_the_per_trajectory_path(tmp_path):
    bare = {"prompt_tokens": [100, 130], "completion_tokens": [20, 5], "cache_salted": [True, False]}
    w = read_trace(write_lines(tmp_path / "m.jsonl", [group(TRAJ, bare)]))
    assert w.call_new_tokens.tolist() == [100, 10, 100, 10]
    assert w.call_cache_salted.tolist() == [False, False, True, False]


def test_write_failure_leaves_the_old_file(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("old\n")
    w = generate("constant", 2, 0)
    bad = w.__class__(**{**{f: getattr(w, f) for f in ("name", "seed", "group_traj_start", "traj_call_start",
                        "group_shared_prompt_tokens", "call_prompt_tokens", "call_new_tokens",
                        "call_completion_tokens", "call_tool_latency_s", "call_cache_salted")},
                        "traj_reward": np.full(w.n_trajectories, np.nan)})
    with pytest.raises(ValueError, match="finite"):
        write_trace(bad, path)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


HEADER = {"schema": TRACE_SCHEMA, "name": "x", "seed": 1, "group_size": 2}
BAD = {
    "bad json": ([HEADER, "{not json"], 2, None, "not valid JSON"),
    "not an object": ([HEADER, "[1, 2]"], 2, None, "expected a JSON object"),
    "unknown schema": ([{**HEADER, "schema": "simrl.trace.v0"}, group()], 1, "schema", "simrl.trace.v1"),
    "missing trajectories": ([HEADER, {"shared_prompt_tokens": 1}], 2, "trajectories", "missing"),
    "empty group": ([HEADER, {"trajectories": []}], 2, "trajectories", "empty group"),
    "group size": ([HEADER, group(), group(TRAJ)], 3, "trajectories", "group_size=2"),
    "missing field": ([HEADER, group(TRAJ, {"prompt_tokens": [5]})], 2, "trajectories[1].completion_tokens",
                      "missing"),
    "ragged lists": ([HEADER, group(TRAJ, {**TRAJ, "completion_tokens": [3]})], 2,
                     "trajectories[1].completion_tokens", "has 1 entries, expected 2"),
    "negative length": ([HEADER, group(), group(TRAJ, {**TRAJ, "completion_tokens": [20, -4]})], 3,
                        "trajectories[1].completion_tokens[1]", ">= 1"),
    "non-integer length": ([HEADER, group(TRAJ, {**TRAJ, "prompt_tokens": [100.5, 130]})], 2,
                           "trajectories[1].prompt_tokens[0]", "an integer"),
    "bool length": ([HEADER, group(TRAJ, {**TRAJ, "new_tokens": [True, 10]})], 2,
                    "trajectories[1].new_tokens[0]", "an integer"),
    "inconsistent new tokens": ([HEADER, group(TRAJ, {**TRAJ, "new_tokens": [100, 11]})], 2,
                                "trajectories[1].new_tokens[1]", "prompt_tokens\\[j\\] - "),
    "shrinking prompt": ([HEADER, group(TRAJ, {"prompt_tokens": [100, 90], "completion_tokens": [5, 5]})], 2,
                         "trajectories[1].prompt_tokens[1]", "extends the previous"),
    "negative latency": ([HEADER, group(TRAJ, {**TRAJ, "tool_latency_s": [0.1, -1]})], 2,
                         "trajectories[1].tool_latency_s[1]", "finite seconds"),
    "salt not bool": ([HEADER, group(TRAJ, {**TRAJ, "cache_salted": [1, 0]})], 2,
                      "trajectories[1].cache_salted[0]", "true or false"),
    "reward not number": ([HEADER, group(TRAJ, {**TRAJ, "reward": "good"})], 2, "trajectories[1].reward",
                          "a number"),
    "shared too long": ([HEADER, group(shared_prompt_tokens=101)], 2, "shared_prompt_tokens", "at most"),
    "too long for model": ([{**HEADER, "max_model_len": 130}, group()], 2, "trajectories[0].completion_tokens[1]",
                           "max_model_len=130"),
    "group count": ([{**HEADER, "groups": 3}, group()], 1, "groups", "declares 3 groups"),
    "sha mismatch": ([{**HEADER, "schedule_sha256": "0" * 64}, group()], 1, "schedule_sha256", "hash to"),
    "late header": ([group(), HEADER], 2, "schema", "only be the first line"),
    "wrong group index": ([HEADER, group(group=4)], 2, "group", "expected group index 0"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_malformed_traces_name_line_and_field(tmp_path, kind):
    records, line, field, words = BAD[kind]
    path = write_lines(tmp_path / "bad.jsonl", records)
    with pytest.raises(TraceError, match=words) as info:
        read_trace(path)
    err = info.value
    assert (err.line, err.field) == (line, field)
    assert str(err).startswith(f"{path}:{line}: " + (f"{field}: " if field else ""))


def test_max_model_len_argument_and_empty_file(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [group()])
    assert read_trace(path).n_groups == 1
    with pytest.raises(TraceError, match="max_model_len=130"):
        read_trace(path, max_model_len=130)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="no group records"):
        read_trace(tmp_path / "empty.jsonl")
    with pytest.raises(TraceError, match="cannot open"):
        read_trace(tmp_path / "missing.jsonl")
