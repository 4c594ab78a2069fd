"""Classes of bad input fixed at their shared reader, second session (same style as
`test_input_classes.py`): each case runs the CLI that reads the input and checks the clean-error
contract of `robust_common.run_input` (exit 2, no traceback, the file and key or line named,
nothing written).
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from robust_common import run_input, valid_artifact_text


def _yaml(data: dict, **over) -> str:
    return yaml.safe_dump({**copy.deepcopy(data), **over}, sort_keys=False)


_SPACE = {"name": "t", "base": {"set": {"deployment.model": "qwen3-8b", "run.training_steps": 1}},
          "axes": [{"name": "inst", "key": "deployment.rollout.instances", "grid": [1, 2]}],
          "engine": "simpy", "surrogate": "off", "top_k": 0}


def _axes(*axes, **over) -> str:
    return _yaml(_SPACE, axes=list(axes), **over)


# An axis value that is not a valid value of its key (a string or float for an integer, a bool,
# a choice that does not exist, a count out of range, a random axis drawing floats for an integer)
# dropped every point it was in, and the sweep exited 0 with the rest. Every value an axis gives a
# key is now checked against the key's type and own validator before any point runs.
AXIS_VALUE = [
    ("grid_str_for_int", _axes({"name": "inst", "key": "deployment.rollout.instances", "grid": [1, "two"]}),
     ["{in}", "axes[0].grid[1]", "deployment.rollout.instances", "expected an integer"]),
    ("grid_float_for_int", _axes({"key": "deployment.rollout.max_num_seqs", "grid": [64, 96.5]}),
     ["{in}", "axes[0].grid[1]", "expected an integer"]),
    ("grid_bool_for_int", _axes({"key": "run.seed", "grid": [1, True]}), ["{in}", "axes[0].grid[1]", "integer"]),
    ("grid_str_for_float", _axes({"key": "deployment.rollout.gpu_memory_utilization", "grid": [0.8, "high"]}),
     ["{in}", "axes[0].grid[1]", "expected a number"]),
    ("grid_str_for_bool", _axes({"key": "deployment.rollout.prefix_caching", "grid": [True, "no"]}),
     ["{in}", "axes[0].grid[1]", "true or false"]),
    ("grid_bad_choice", _axes({"key": "router.name", "grid": ["round_robin", "round_robbin"]}),
     ["{in}", "axes[0].grid[1]", "router.name", "least_requests"]),
    ("grid_zero_count", _axes({"key": "deployment.rollout.instances", "grid": [0, 1]}),
     ["{in}", "axes[0].grid[0]", "[1, 100000]"]),
    ("grid_scalar_for_section", _axes({"key": "deployment.rollout", "grid": [1, 2]}),
     ["{in}", "axes[0].grid[0]", "mapping"]),
    ("linked_member", _axes({"linked": [{"key": "deployment.rollout.instances", "values": [1, 2]},
                                        {"key": "run.seed", "values": [0, "a"]}]}),
     ["{in}", "axes[0].linked[1].grid[1]", "run.seed"]),
    ("random_float_for_int", _axes({"key": "deployment.rollout.max_num_seqs", "random": {"low": 8, "high": 64}},
                                   samples=2), ["{in}", "axes[0].random.low", "integer: true"]),
    ("lhs_out_of_range", _axes({"key": "deployment.rollout.gpu_memory_utilization",
                                "lhs": {"low": 0.5, "high": 1.5}}, samples=2),
     ["{in}", "axes[0].lhs.high", "<= 1.0"]),
    ("policy_key", _axes({"key": "policy.max_staleness", "grid": [0, "one"]},
                         base={"set": {"policy": "bounded_async", "run.training_steps": 1}}),
     ["{in}", "axes[0].grid[1]", "policy.max_staleness", "integer"]),
]


@pytest.mark.parametrize("name, content, expect", AXIS_VALUE, ids=[c[0] for c in AXIS_VALUE])
def test_sweep_axis_value_is_checked_before_any_point_runs(tmp_path, name, content, expect):
    run_input("sweep", content, tmp_path, expect, name)


def test_sweep_grid_option_value_is_checked(tmp_path):
    from robust_common import run_args

    from simrl_explore.cli_sweep import main as sweep_cli

    run_args(sweep_cli, ["--grid", "deployment.rollout.instances=1,two", "-o", "{tmp}/out", "-q", "--jobs", "1"],
             tmp_path, ["--grid", "deployment.rollout.instances", "expected an integer"], "sweep --grid")


def _artifact(bundled: str, edit) -> str:
    from pathlib import Path

    import simrl.cost

    text = valid_artifact_text() if bundled == "roofline" else \
        (Path(simrl.cost.__file__).parent / "data" / bundled).read_text(encoding="utf-8")
    d = json.loads(text)
    edit(d)
    return json.dumps(d)


# A validity_domain dimension the model never checks (a misspelling) bounded nothing and was
# accepted; each fitted family declares the dimensions it checks, and any other is refused.
DOMAIN = [
    ("roofline_typo", _artifact("roofline", lambda d: d["validity_domain"].update(batch_sise=[1, 64])),
     ["validity_domain.batch_sise", "did you mean 'batch_size'"]),
    ("composed_typo", _artifact("rollout-composed-h100.json", lambda d: d["validity_domain"].update(num_token=[1, 9])),
     ["validity_domain.num_token", "did you mean 'num_tokens'"]),
    ("training_typo", _artifact("training-analytical-h100.json",
                                lambda d: d["validity_domain"].update(seqlen=[1, 4096])),
     ["validity_domain.seqlen", "did you mean 'seq_len'"]),
    ("unrelated_dim", _artifact("roofline", lambda d: d["validity_domain"].update(seq_len=[1, 4096])),
     ["validity_domain.seq_len", "kv_tokens"]),
]


@pytest.mark.parametrize("name, content, expect", DOMAIN, ids=[c[0] for c in DOMAIN])
def test_artifact_validity_domain_dimension_is_known(tmp_path, name, content, expect):
    run_input("artifact", content, tmp_path, ["{in}", *expect], name)
