"""Hypothesis-generated malformed inputs, one strategy per format.

Each example starts from a valid input and applies one mutation that always makes it invalid:
a wrong-typed or non-finite or out-of-range value at a random field, a misspelt field, a
duplicate key, bytes that are not UTF-8, or a truncated record. The contract is the corpus's:
exit 2, no traceback, the location named (file:line, or the key path), nothing left behind.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from robust_common import (
    VALID_CONFIG,
    VALID_OBSERVATION,
    VALID_REALRUN,
    VALID_SPLITWISE,
    VALID_TURNS,
    run_args,
    run_input,
    valid_trace_text,
)

from simrl.cli.main import cli as srl_cli

# 25 examples per format in CI (175 in all); SIMRL_ROBUST_EXAMPLES=500 for a deeper search.
SETTINGS = settings(max_examples=int(os.environ.get("SIMRL_ROBUST_EXAMPLES", "25")), deadline=None, derandomize=os.environ.get("SIMRL_ROBUST_EXAMPLES") is None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BAD_BYTES = [b"\xff", b"\xfe", b"\x80", b"\xc3\x28", b"\xe2\x82", b"\xf0\x28\x8c\x28"]
# Values no numeric field accepts. The JSON decoder refuses the first four everywhere; the rest
# are wrong types, refused where the field is read.
BAD_JSON_NUMBERS = ["NaN", "Infinity", "-Infinity", str(2**70)]
BAD_TYPED = ["true", "false", "[1]", '{"x": 1}', '"7"']


def _leaves(node, path=()):
    """(path, value) of every numeric (non-bool) leaf."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, (*path, i))
    elif isinstance(node, int | float) and not isinstance(node, bool):
        yield path, node


def _objects(node, path=()):
    """Paths of every JSON object (where a misspelt field can be inserted)."""
    if isinstance(node, dict):
        yield path
        for k, v in node.items():
            if k not in ("knobs", "inputs", "provenance"):  # free-form maps: any key is allowed there
                yield from _objects(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _objects(v, (*path, i))


def _get(node, path):
    for k in path:
        node = node[k]
    return node


def _typo(key: str, known) -> str:
    for cand in (key[:-1], key + "s", key[0] + key[2:] if len(key) > 2 else key + "x", key + "_x"):
        if cand and cand not in known:
            return cand
    return key + "_typo"


@st.composite
def jsonl_mutation(draw, records: list[dict], allow_strings: bool = True):
    """(file bytes, expected substrings) for one always-invalid mutation of ``records``."""
    i = draw(st.integers(0, len(records) - 1))
    recs = copy.deepcopy(records)
    kind = draw(st.sampled_from(["value", "field", "duplicate", "bytes", "truncate"]))
    lines = [json.dumps(r) for r in recs]
    expect = [f"{{in}}:{i + 1}"]
    if kind == "value":
        leaves = [p for p, _ in _leaves(recs[i]) if "knobs" not in p and "provenance" not in p]
        path = draw(st.sampled_from(leaves))
        bad = BAD_JSON_NUMBERS + [b for b in BAD_TYPED if allow_strings or not b.startswith('"')]
        parent = _get(recs[i], path[:-1])
        parent[path[-1]] = "@@BAD@@"
        lines[i] = json.dumps(recs[i]).replace('"@@BAD@@"', draw(st.sampled_from(bad)))
    elif kind == "field":
        where = draw(st.sampled_from(list(_objects(recs[i]))))
        obj = _get(recs[i], where)
        if not obj:
            obj["x_unknown_field"] = 1
            name = "x_unknown_field"
        else:
            name = _typo(draw(st.sampled_from(sorted(obj))), obj)
            obj[name] = 1
        lines[i] = json.dumps(recs[i])
        expect.append(repr(name))
    elif kind == "duplicate":
        first = next(iter(recs[i]))
        lines[i] = lines[i].replace("{", "{" + json.dumps(first) + ": " + json.dumps(recs[i][first]) + ", ", 1)
        expect.append("duplicate key")
    data = "\n".join(lines).encode() + b"\n"
    if kind in ("bytes", "truncate"):
        raw = [line.encode() for line in lines]
        if kind == "bytes":
            at = draw(st.integers(0, len(raw[i])))
            raw[i] = raw[i][:at] + draw(st.sampled_from(BAD_BYTES)) + raw[i][at:]
            expect.append("UTF-8")
        else:
            raw[i] = raw[i][: draw(st.integers(1, len(raw[i]) - 2))]
        data = b"\n".join(raw) + b"\n"
    return data, expect


def _run(fmt, data, expect):
    with tempfile.TemporaryDirectory() as d:
        run_input(fmt, data, Path(d), expect, "generated")


TRACE_RECORDS = [json.loads(line) for line in valid_trace_text().splitlines()]


@SETTINGS
@given(jsonl_mutation(TRACE_RECORDS))
def test_generated_trace(case):
    _run("trace", *case)


@SETTINGS
@given(jsonl_mutation([VALID_OBSERVATION, {**VALID_OBSERVATION, "value": 3.5}]))
def test_generated_observations(case):
    _run("observations", *case)


@SETTINGS
@given(jsonl_mutation(VALID_REALRUN))
def test_generated_realrun(case):
    _run("realrun", *case)


@SETTINGS
@given(jsonl_mutation(VALID_TURNS, allow_strings=False))
def test_generated_collected_logs(case):
    _run("collect", *case)


# -- YAML configuration and dotted overrides -------------------------------------------------

def _config_leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _config_leaves(v, (*path, k))
    else:
        yield path, node


CONFIG_LEAVES = list(_config_leaves(VALID_CONFIG))


def _bad_for(value) -> list:
    if isinstance(value, bool):
        return ["false", 1, 0.0, [True], None]
    if isinstance(value, int):
        return [2.5, "3", True, float("nan"), 2**70, [1], {"a": 1}, None]
    if isinstance(value, float):
        return ["0.5", True, float("nan"), float("-inf"), [0.5], None]
    return [123, 1.5, True, ["x"], {"a": 1}, None]


def _key_path(path) -> str:
    return ".".join(path[:-1]) if path[-1] == "kind" else ".".join(path)


@st.composite
def config_mutation(draw):
    data = copy.deepcopy(VALID_CONFIG)
    kind = draw(st.sampled_from(["value", "field", "duplicate", "bytes"]))
    if kind == "value":
        path, value = draw(st.sampled_from(CONFIG_LEAVES))
        bad = draw(st.sampled_from(_bad_for(value)))
        if bad is None and path[-1] in ("group_size",):  # null is this knob's "generator default"
            bad = 2.5
        _get(data, path[:-1])[path[-1]] = bad
        return yaml.safe_dump(data, sort_keys=False).encode(), [_key_path(path)]
    if kind == "field":
        sections = [p for p, v in _sections(data)]
        where = draw(st.sampled_from(sections))
        obj = _get(data, where)
        name = _typo(draw(st.sampled_from(sorted(obj))), obj)
        obj[name] = 1
        return yaml.safe_dump(data, sort_keys=False).encode(), [".".join((*where, name))]
    lines = yaml.safe_dump(data, sort_keys=False).encode().splitlines()
    i = draw(st.integers(0, len(lines) - 1))
    if kind == "duplicate":
        leaf_lines = [j for j, line in enumerate(lines) if not line.rstrip().endswith(b":")]
        i = draw(st.sampled_from(leaf_lines))
        lines.insert(i + 1, lines[i])
        return b"\n".join(lines) + b"\n", [f"{{in}}:{i + 2}", "duplicate key"]
    at = draw(st.integers(0, len(lines[i])))
    lines[i] = lines[i][:at] + draw(st.sampled_from(BAD_BYTES)) + lines[i][at:]
    return b"\n".join(lines) + b"\n", [f"{{in}}:{i + 1}", "UTF-8"]


def _sections(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _sections(v, (*path, k))


@SETTINGS
@given(config_mutation())
def test_generated_yaml_config(case):
    _run("config", *case)


def _override_text(v) -> str:
    if isinstance(v, float) and v != v:
        return ".nan"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "-.inf" if v < 0 else ".inf"
    if v is None:
        return "null"
    return json.dumps(v) if not isinstance(v, str) else json.dumps(v)


@SETTINGS
@given(st.sampled_from(CONFIG_LEAVES).flatmap(
    lambda leaf: st.tuples(st.just(leaf[0]), st.sampled_from([b for b in _bad_for(leaf[1]) if b is not None]))))
def test_generated_dotted_override(case):
    path, bad = case
    key = "policy" if path == ("policy", "kind") else ".".join(path)
    with tempfile.TemporaryDirectory() as d:
        run_args(srl_cli, ["run", "-o", "{tmp}/out", f"{key}={_override_text(bad)}"], Path(d),
                 [_key_path(path)], f"override {key}")


# -- Splitwise CSV -----------------------------------------------------------------------------

SPLIT_ROWS = VALID_SPLITWISE.splitlines()


@st.composite
def splitwise_mutation(draw):
    rows = list(SPLIT_ROWS)
    i = draw(st.integers(1, len(rows) - 1))
    kind = draw(st.sampled_from(["token", "arrival", "columns", "bytes"]))
    cells = rows[i].split(",")
    if kind == "token":
        col = draw(st.sampled_from([1, 2]))
        cells[col] = draw(st.sampled_from(["abc", "1.5", "7.0", "-3", "0", "99999999999999999999", "nan", "",
                                           "1e3", "0x10", "١٢"]))
    elif kind == "arrival":
        cells[0] = draw(st.sampled_from(["nan", "inf", "-inf", "abc", ""]))
    elif kind == "columns":
        cells = cells[:2] if draw(st.booleans()) else [*cells, "5"]
    rows[i] = ",".join(cells)
    data = ("\n".join(rows) + "\n").encode()
    if kind == "bytes":
        raw = data.split(b"\n")
        at = draw(st.integers(0, len(raw[i])))
        raw[i] = raw[i][:at] + draw(st.sampled_from(BAD_BYTES)) + raw[i][at:]
        data = b"\n".join(raw)
    return data, [f"{{in}}:{i + 1}"]


@SETTINGS
@given(splitwise_mutation())
def test_generated_splitwise_csv(case):
    _run("splitwise", *case)
