"""Classes of bad input fixed at their shared reader (one parametrized test per class).

Each case runs the CLI that reads the input and checks the clean-error contract of
`robust_common.run_input`: exit 2, no traceback, a message naming the file and the key or line,
nothing written.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from robust_common import VALID_CONFIG, VALID_STUDY, run_args, run_input, valid_artifact_text

from simrl.cli.main import cli as srl_cli


def _yaml(data: dict, **over) -> str:
    return yaml.safe_dump({**copy.deepcopy(data), **over}, sort_keys=False)


_SPACE = {"name": "t", "base": {"set": {"deployment.model": "qwen3-8b", "run.training_steps": 1}},
          "axes": [{"name": "inst", "key": "deployment.rollout.instances", "grid": [1, 2]}],
          "engine": "simpy", "surrogate": "off", "top_k": 0}

# A number that overflows a float used to become .inf ("no limit" for a time horizon); .nan was
# refused only where a typed field read it. The strict YAML loader refuses both, by key and line.
NONFINITE = [
    ("config", _yaml(VALID_CONFIG) + "cost:\n  offload_bytes_per_s: 1e400\n",
     ["{in}:", "cost.offload_bytes_per_s", "overflows"]),
    ("config", _yaml(VALID_CONFIG).replace("seed: 0", "seed: 0\n  time_horizon_s: 1.0e+999"),
     ["{in}:", "run.time_horizon_s", "overflows", ".inf"]),
    ("config", _yaml(VALID_CONFIG) + "workload:\n  knobs:\n    calls: [1, -2e3080]\n",
     ["{in}:", "workload.knobs.calls[1]", "overflows"]),
    ("sweep", _yaml(_SPACE).replace("top_k: 0", "top_k: 0\nrecheck_tolerance: 1e400"),
     ["{in}:", "recheck_tolerance", "overflows"]),
    ("sweep", _yaml(_SPACE, axes=[{"name": "h", "key": "run.time_horizon_s", "grid": [10.0, 99.5]}])
     .replace("99.5", "1e400"), ["{in}:", "axes[0].grid[1]", "overflows"]),
    ("research", _yaml(VALID_STUDY).replace("- 1.0", "- 1e400"), ["{in}:", "variation.values[1]", "overflows"]),
    ("research", _yaml(VALID_STUDY).replace("- 1.0", "- .NaN"), ["{in}:", "variation.values[1]", "finite"]),
]


@pytest.mark.parametrize("fmt, content, expect", NONFINITE, ids=[f"{c[0]}-{i}" for i, c in enumerate(NONFINITE)])
def test_nonfinite_yaml_number_is_refused_with_key_and_line(tmp_path, fmt, content, expect):
    run_input(fmt, content, tmp_path, expect)


@pytest.mark.parametrize("argv, expect", [
    (["run.time_horizon_s=1e400"], ["run.time_horizon_s=1e400", "overflows"]),
    (["cost.rollout_knobs.a=[1, 1e999]"], ["cost.rollout_knobs.a", "overflows"]),
])
def test_nonfinite_override_is_refused(tmp_path, argv, expect):
    run_args(srl_cli, ["run", "-o", "{tmp}/out", *argv], tmp_path, expect, "override")


def test_horizon_inf_spelling_still_means_no_limit(tmp_path):
    from simrl.config import load_config

    p = tmp_path / "c.yaml"
    p.write_text("run:\n  time_horizon_s: .inf\n")
    assert load_config(str(p)).run.time_horizon_s == float("inf")


# An empty document (nothing, only comments, a bare `---`) used to run the embedded default (a
# config) silently; it is almost always a truncated or wrong file.
EMPTY = [("config", text) for text in ("", "# only a comment\n", "---\n", "\n  \n")] + \
        [("sweep", "# nothing\n"), ("research", "---\n"), ("observations", "\n\n")]


@pytest.mark.parametrize("fmt, content", EMPTY, ids=[f"{f}-{i}" for i, (f, _) in enumerate(EMPTY)])
def test_empty_document_is_refused(tmp_path, fmt, content):
    run_input(fmt, content, tmp_path, ["{in}", "empty"] + (["top level"] if fmt != "observations" else []))


def _art(edit) -> str:
    d = json.loads(valid_artifact_text())  # the bundled roofline artifact
    edit(d)
    return json.dumps(d)


def _composed(edit) -> str:
    from pathlib import Path

    import simrl.cost

    d = json.loads((Path(simrl.cost.__file__).parent / "data" / "rollout-composed-h100.json").read_text())
    edit(d)
    return json.dumps(d)


def _training(edit) -> str:
    from pathlib import Path

    import simrl.cost

    d = json.loads((Path(simrl.cost.__file__).parent / "data" / "training-analytical-h100.json").read_text())
    edit(d)
    return json.dumps(d)


def _first(d: dict):
    return d[sorted(d)[0]]


# Unknown keys in a cost artifact were ignored (a misspelt coefficient left the default in
# force); nested coefficients of wrong type or zero bandwidth failed mid-run (TypeError,
# division by zero). Every key the run reads is checked when the artifact is read.
ARTIFACT = [
    ("typo_coefficient", _art(lambda d: d["coefficients"].update(compute_efficency=0.5)),
     ["coefficients.compute_efficency", "did you mean 'compute_efficiency'"]),
    ("typo_top", _art(lambda d: d.update(fited_for={})), ["fited_for", "did you mean 'fitted_for'"]),
    ("typo_fitted_for", _art(lambda d: d["fitted_for"].update(tpp=2)), ["fitted_for.tpp", "did you mean 'tp'"]),
    ("typo_provenance", _art(lambda d: d["provenance"].update(n_observation=3)), ["provenance.n_observation"]),
    ("provenance_count_str", _art(lambda d: d["provenance"].update(n_observations="many")),
     ["provenance.n_observations", "whole number"]),
    ("training_set_typo", _training(lambda d: d["coefficients"].update(tme=[1.0])), ["coefficients.tme"]),
    ("op_typo", _composed(lambda d: d["coefficients"]["kernel_db"]["operators"]["add"].update(sharpnes=2)),
     ["coefficients.kernel_db.operators.add.sharpnes", "did you mean 'sharpness'"]),
    ("op_string", _composed(lambda d: d["coefficients"]["kernel_db"]["operators"]["add"].update(flops_per_s="1e12")),
     ["coefficients.kernel_db.operators.add.flops_per_s", "number > 0"]),
    ("op_zero_bandwidth", _composed(lambda d: d["coefficients"]["kernel_db"]["operators"]["add"].update(bytes_per_s=0)),
     ["coefficients.kernel_db.operators.add.bytes_per_s", "number > 0"]),
    ("collective_times_str", _composed(lambda d: _first(d["coefficients"]["collectives"])["time_s"].__setitem__(0, "x")),
     ["coefficients.collectives.", ".time_s", "list of numbers"]),
    ("collective_lengths", _composed(lambda d: _first(d["coefficients"]["collectives"])["time_s"].pop()),
     ["coefficients.collectives.", ".time_s", "one time per size"]),
    ("collective_scalar", _composed(lambda d: d["coefficients"]["collectives"].update(x=3)),
     ["coefficients.collectives.x", "expected an object"]),
]


@pytest.mark.parametrize("name, content, expect", ARTIFACT, ids=[c[0] for c in ARTIFACT])
def test_artifact_key_the_run_reads_is_checked(tmp_path, name, content, expect):
    run_input("artifact", content, tmp_path, ["{in}", *expect], name)


def _cli(prog: str):
    from adapters.cli import cli as profile_cli
    from simrl.cli.predict import main as predict_cli

    return {"srl-predict": predict_cli, "srl-profile": profile_cli}[prog]


# click's FLOAT and FloatRange accept nan, inf and 1e400 (a NaN passes every range check): every
# float option uses `simrl.cli.app.FiniteFloat`, and count options are ranges, refused at parse time.
OPTIONS = [
    ("srl-predict", ["convert", "{tmp}", "--at", "nan", "-o", "{tmp}/s.json"], ["'--at'", "finite"]),
    ("srl-predict", ["convert", "{tmp}", "--at", "1e400", "-o", "{tmp}/s.json"], ["'--at'", "finite"]),
    ("srl-predict", ["convert", "{tmp}", "--at", "-1", "-o", "{tmp}/s.json"], ["'--at'", ">= 0"]),
    ("srl-predict", ["move-engines", "--spike", "--tolerance", "nan", "-o", "{tmp}/mo"], ["'--tolerance'", "finite"]),
    ("srl-profile", ["fetch", "vidur", "--timeout", "inf", "-o", "{tmp}/v"], ["'--timeout'", "finite"]),
    ("srl-profile", ["weight-sync", "--bucket-mb", "0", "-o", "{tmp}/w.jsonl"], ["'--bucket-mb'", "> 0"]),
    ("srl-profile", ["vllm", "--model", "m", "--gpu-memory-utilization", "nan", "-o", "{tmp}/x.jsonl"],
     ["'--gpu-memory-utilization'", "finite"]),
    ("srl-profile", ["vllm", "--model", "m", "--tp", "0", "-o", "{tmp}/x.jsonl"], ["'--tp'"]),
    ("srl-profile", ["kernels", "--warmup", "-1", "-o", "{tmp}/k.jsonl"], ["'--warmup'"]),
]


@pytest.mark.parametrize("prog, argv, expect", OPTIONS, ids=[f"{c[0]}-{c[1][0]}-{c[1][-3]}" for c in OPTIONS])
def test_nonfinite_or_out_of_range_option_is_refused(tmp_path, prog, argv, expect):
    run_args(_cli(prog), argv, tmp_path, expect, f"{prog} {' '.join(argv)}")


def _trace_edit(edit) -> str:
    from robust_common import valid_trace_text

    recs = [json.loads(line) for line in valid_trace_text().splitlines()]
    edit(recs)
    return "".join(json.dumps(r) + "\n" for r in recs)


# A trace's records are read by type: a trajectory that is not an object was an AttributeError in
# the fast gather path; the header's knobs (the engine reads the drift knobs and max_model_len
# from them) were not checked at all.
TRACE = [
    ("trajectory_list", _trace_edit(lambda r: r[1]["trajectories"].__setitem__(1, [1, 2])),
     ["{in}:2", "trajectories[1]", "expected an object"]),
    ("knob_growth_string", _trace_edit(lambda r: r[0]["knobs"].update(length_growth_per_step="abc")),
     ["{in}:1", "knobs.length_growth_per_step", "number"]),
    ("knob_max_model_len_float", _trace_edit(lambda r: r[0]["knobs"].update(max_model_len=2.5)),
     ["{in}:1", "knobs.max_model_len", "integer"]),
    ("knob_typo", _trace_edit(lambda r: r[0]["knobs"].update(length_corelation=0.3)),
     ["{in}:1", "knobs.length_corelation", "did you mean 'length_correlation'"]),
    ("knob_drift_bad", _trace_edit(lambda r: r[0]["knobs"].update(length_drift_knots=[[0, -1.0]])),
     ["{in}:1", "knobs", "length_drift_knots"]),
]


@pytest.mark.parametrize("name, content, expect", TRACE, ids=[c[0] for c in TRACE])
def test_trace_record_of_wrong_shape_is_named(tmp_path, name, content, expect):
    run_input("trace", content, tmp_path, expect, name)


# Generator knobs: a knob named like a generate() argument was a TypeError traceback
# (`srl-workload synth rl_math groups=2`); a float knob given as text took nan, inf and 1e400.
KNOB_CASES = [
    ("synth", ["synth", "rl_math", "-o", "{tmp}/w.jsonl", "groups=2"], ["groups is not a knob", "--groups"]),
    ("synth", ["synth", "rl_math", "-o", "{tmp}/w.jsonl", "group_size=2"], ["group_size", "--group-size"]),
    ("synth", ["synth", "long_generation", "-o", "{tmp}/w.jsonl", "length_correlation=1e400"],
     ["length_correlation", "finite"]),
    ("synth", ["synth", "long_generation", "-o", "{tmp}/w.jsonl", "system_knots=[[0, 1], [1, NaN]]"],
     ["system_knots", "NaN"]),
    ("srl", ["run", "-o", "{tmp}/o", "workload.knobs.seed=3"], ["workload.knobs", "workload.seed"]),
    ("srl", ["run", "-o", "{tmp}/o", "workload.generator=long_generation", "workload.knobs.length_correlation=nan"],
     ["length_correlation", "finite"]),
]


@pytest.mark.parametrize("prog, argv, expect", KNOB_CASES, ids=[f"{c[0]}-{c[1][-1]}" for c in KNOB_CASES])
def test_generator_knob_is_checked(tmp_path, prog, argv, expect):
    from simrl.cli.workload import main as workload_cli

    run_args({"synth": workload_cli, "srl": srl_cli}[prog], argv, tmp_path, expect, " ".join(argv))


def _turns(**edit) -> str:
    from robust_common import VALID_TURNS

    recs = copy.deepcopy(VALID_TURNS)
    recs[0].update(edit)
    return "".join(json.dumps(r) + "\n" for r in recs)


def _snapshot(edit) -> str:
    from robust_common import valid_snapshot

    d = valid_snapshot()
    edit(d["pipeline"]["policy_state"])
    return json.dumps(d)


# A number written as a string: turns.jsonl took "12" for 12 (only OpenAI metadata values are text);
# a snapshot's policy state was restored untyped (a list for a mapping failed mid-prediction).
STRING_OR_SHAPE = [
    ("collect", "reward_str", _turns(reward="1.0"), ["{in}:1", "reward", "without quotes"]),
    ("collect", "tokens_str", _turns(prompt_tokens="100"), ["{in}:1", "prompt_tokens", "without quotes"]),
    ("snapshot", "state_list", _snapshot(lambda s: s.update(occ=[1, 2])),
     ["{in}", "pipeline.policy_state.occ", "expected an object"]),
    ("snapshot", "state_key", _snapshot(lambda s: s.update(res={"zz": 1})),
     ["{in}", "pipeline.policy_state.res", "integer"]),
    ("snapshot", "state_str", _snapshot(lambda s: s.update(seq="3")), ["{in}", "pipeline.policy_state.seq", "integer"]),
]


@pytest.mark.parametrize("fmt, name, content, expect", STRING_OR_SHAPE, ids=[c[1] for c in STRING_OR_SHAPE])
def test_value_of_wrong_type_is_named(tmp_path, fmt, name, content, expect):
    run_input(fmt, content, tmp_path, expect, name)


# Numbers of a research study that were not bounded: a 2**70 seed or dispersion ran (or raised
# OverflowError mid-study), 2**70 proposals never ended; a bad base.set key was found after the
# output folder was made.
STUDY = [
    ("seed_huge", _yaml(VALID_STUDY, seeds=[0, 2**70]), ["{in}", "seeds[1]", "2**63"]),
    ("seed_bool", _yaml(VALID_STUDY, seeds=[0, True]), ["{in}", "seeds", "integer"]),
    ("dispersion_huge", _yaml(VALID_STUDY, variation={"name": "length_dispersion", "values": [0.0, 2**70]}),
     ["{in}", "variation.values[1]", "[0, 10]"]),
    ("proposals_huge", _yaml(VALID_STUDY, proposals=2**70), ["{in}", "proposals", "[0, 1000]"]),
    ("proposer_seed_str", _yaml(VALID_STUDY, proposer_seed="abc"), ["{in}", "proposer_seed"]),
    ("name_list", _yaml(VALID_STUDY, name=[1]), ["{in}", "name", "string"]),
    ("base_set_typo", _yaml(VALID_STUDY, base={"set": {"deployment.modle": "x"}}),
     ["{in}", "base", "deployment.modle", "did you mean 'model'"]),
]


@pytest.mark.parametrize("name, content, expect", STUDY, ids=[c[0] for c in STUDY])
def test_study_value_is_bounded_and_checked_before_output(tmp_path, name, content, expect):
    run_input("research", content, tmp_path, expect, name)
