"""Search spaces: expansion (grid, linked, random, LHS, derived, constraints) and clear errors."""

import math

import pytest
import yaml

from simrl_explore.expr import Expr, ExprError
from simrl_explore.runner import check_keys
from simrl_explore.space import SpaceError, load_space, parse_space


def space(**kw):
    data = {"axes": [{"name": "a", "grid": [1, 2]}]}
    data.update(kw)
    return parse_space(data, "s.yaml")


def test_grid_linked_derived_and_constraints_expand_in_order():
    s = parse_space({
        "constants": {"budget": 8},
        "axes": [
            {"name": "rollout_gpus", "grid": [2, 4, 6]},
            {"name": "tp", "key": "deployment.rollout.tp", "grid": [1, 4]},
            {"linked": [{"name": "batch", "key": "policy.batch_groups", "values": [4, 8]},
                        {"name": "groups", "key": "workload.groups", "values": [16, 32]}]},
        ],
        "derived": [{"name": "train", "key": "deployment.training.gpus", "expr": "budget - rollout_gpus"},
                    {"name": "inst", "key": "deployment.rollout.instances", "expr": "rollout_gpus // tp"}],
        "constraints": [{"expr": "rollout_gpus % tp == 0", "reason": "TP does not divide"}],
    }, "s.yaml")
    pts = s.points()
    assert len(pts) == 3 * 2 * 2 == s.size()  # linked axes advance together: 2 values, not 4
    first = pts[0]
    assert first.variables == {"budget": 8, "rollout_gpus": 2, "tp": 1, "batch": 4, "groups": 16, "train": 6, "inst": 2}
    assert first.overrides == ("deployment.rollout.tp=1", "policy.batch_groups=4", "workload.groups=16",
                               "deployment.training.gpus=6", "deployment.rollout.instances=2")
    assert {(p.variables["batch"], p.variables["groups"]) for p in pts} == {(4, 16), (8, 32)}
    dropped = [p for p in pts if p.dropped]
    # 2 % 4 and 6 % 4 are not 0: rollout_gpus in {2, 6} with tp=4, two linked values each.
    assert len(dropped) == 4 and all(p.dropped == "constraint: TP does not divide" for p in dropped)


def test_lhs_hits_every_stratum_once_and_is_deterministic():
    data = {"seed": 3, "samples": 10, "axes": [{"name": "x", "lhs": {"low": 0.0, "high": 1.0}},
                                               {"name": "y", "random": {"low": 1, "high": 1000, "log": True,
                                                                         "integer": True}}]}
    pts = parse_space(data).points()
    xs = sorted(p.variables["x"] for p in pts)
    assert [math.floor(x * 10) for x in xs] == list(range(10))  # one sample per tenth
    assert all(isinstance(p.variables["y"], int) and 1 <= p.variables["y"] <= 1000 for p in pts)
    again = parse_space(data).points()
    assert [p.variables for p in again] == [p.variables for p in pts]
    other = parse_space({**data, "seed": 4}).points()
    assert [p.variables for p in other] != [p.variables for p in pts]


def test_samples_cross_the_grid():
    s = space(samples=3, axes=[{"name": "a", "grid": [1, 2]}, {"name": "b", "lhs": {"low": 0, "high": 1}}])
    pts = s.points()
    assert len(pts) == 6
    # The same samples under every grid row (comparisons across the grid are paired).
    assert [p.variables["b"] for p in pts[:3]] == [p.variables["b"] for p in pts[3:]]


@pytest.mark.parametrize("data, match", [
    ({"axes": [{"name": "a", "grid": [1]}, {"name": "a", "grid": [2]}]}, "axis 'a' repeated"),
    ({"axes": [{"key": "run.seed", "grid": [1]}, {"name": "b", "key": "run.seed", "grid": [2]}]}, "swept twice"),
    ({"axes": [{"name": "a", "grid": [1, 2, 1]}]}, r"axes\[0\].grid\[2\]: value 1 repeated"),
    ({"axes": [{"name": "a", "gird": [1]}]}, r"axes\[0\].gird: unknown key"),
    ({"axis": []}, r"s.yaml.axis: unknown key"),
    ({"axes": [{"name": "a", "lhs": {"low": 0, "high": 1}}]}, "need samples > 0"),
    ({"axes": [{"name": "a", "lhs": {"low": 2, "high": 1}}], "samples": 2}, "must be below"),
    ({"axes": [{"name": "a", "grid": [1]}], "derived": [{"name": "b", "expr": "c + 1"}]}, "unknown variable 'c'"),
    ({"axes": [{"name": "a", "grid": [1]}], "constraints": [{"expr": "__import__('os')"}]}, "Call is not allowed"),
    ({"axes": [{"name": "a", "grid": [1]}], "constraints": [{"expr": "a.real > 0"}]}, "Attribute is not allowed"),
    ({"axes": [{"linked": [{"name": "a", "values": [1, 2]}, {"name": "b", "values": [1]}]}]}, "equally many"),
    ({"axes": [{"name": "a", "grid": [1]}], "objectives": ["speed"]}, "objectives"),
    ({"axes": [{"name": "a", "grid": [1]}], "engine": "gpu"}, "engine"),
    ({"axes": [{"name": "a", "grid": [1]}], "plot": {"x": "nope"}}, "plot.x: unknown variable"),
])
def test_bad_spaces_are_clear_errors(data, match):
    with pytest.raises(SpaceError, match=match):
        parse_space(data, "s.yaml")


def test_duplicate_yaml_keys_and_bad_config_keys(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("axes:\n  - {name: a, grid: [1]}\nseed: 1\nseed: 2\n")
    with pytest.raises(SpaceError, match=r"dup.yaml:4: duplicate key 'seed' \(repeated on line 4, first on line 3\)"):
        load_space(str(p))
    p.write_text(yaml.safe_dump({"axes": [{"key": "deployment.rollout.tpp", "grid": [1]}]}))
    with pytest.raises(SpaceError, match="'deployment.rollout.tpp' is not a configuration key"):
        check_keys(load_space(str(p)))
    p.write_text(yaml.safe_dump({"axes": [{"key": "workload.knobs.anything", "grid": [1]}]}))
    check_keys(load_space(str(p)))  # knob dicts take any name (the generator checks them)


def test_expressions():
    assert Expr("a // b + max(a, 3) if a > 1 else -1", "t")({"a": 7, "b": 2}) == 3 + 7
    assert Expr("a % 2 == 0 and not b", "t")({"a": 4, "b": False}) is True
    assert Expr("1 < a <= 3", "t")({"a": 4}) is False
    with pytest.raises(ExprError, match="cannot parse"):
        Expr("a +", "t")
