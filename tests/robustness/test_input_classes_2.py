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


# A workload the space's base builds (a generator knob out of range) stopped the sweep with the generator's
# message alone ("workload: rl_math: knob ..."), not naming the space file; a point whose own workload override
# is out of range stopped the whole sweep too. The base's is now the space file's error, a point's is a drop.
BASE_WORKLOAD = [
    ("base_knob_out_of_range",
     _yaml(_SPACE, base={"set": {"run.training_steps": 1, "workload.knobs.max_completion": -5}}),
     ["{in}", "base:", "max_completion=-5", ">= 1"]),
    ("base_knob_unknown_generator_arg",
     _yaml(_SPACE, base={"set": {"run.training_steps": 1, "workload.knobs.max_model_len": 0}}),
     ["{in}", "base:", "max_model_len"]),
]


@pytest.mark.parametrize("name, content, expect", BASE_WORKLOAD, ids=[c[0] for c in BASE_WORKLOAD])
def test_sweep_base_workload_error_names_the_space_file(tmp_path, name, content, expect):
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


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    from robust_common import small_run as make

    return make(tmp_path_factory.mktemp("runs"), steps=2)


def _report(edit):
    def apply(d):
        r = json.loads((d / "report.json").read_text())
        edit(r)
        (d / "report.json").write_text(json.dumps(r))
    return apply


def _telemetry(kind, edit):
    def apply(d):
        lines = (d / "telemetry.jsonl").read_text().splitlines()
        for i, line in enumerate(lines[1:], 1):
            ev = json.loads(line)
            if ev["kind"] == kind:
                edit(ev)
                lines[i] = json.dumps(ev)
                break
        (d / "telemetry.jsonl").write_text("\n".join(lines) + "\n")
    return apply


# The fields of report.json and telemetry.jsonl the plots (and the real-run export) read were
# used unchecked: a missing or mistyped one was a KeyError / TypeError traceback half-way through
# the plots, with the first ones already written. They are checked when the files are read
# (file, line, key path), and the plots are rendered in a staging folder.
RUNDIR = [
    ("step_field_str", _report(lambda r: r["steps"][0].__setitem__("train_end", "x")),
     ["report.json", "steps[0].train_end", "finite time"]),
    ("step_field_missing", _report(lambda r: r["steps"][1].pop("wait_start")), ["report.json", "steps[1].wait_start",
                                                                              "missing"]),
    ("staleness_str", _report(lambda r: r["steps"][0].__setitem__("staleness", "x")),
     ["report.json", "steps[0].staleness", "list of integers"]),
    ("calls_scalar", _report(lambda r: r.__setitem__("calls", 3)), ["report.json", "calls", "expected a list"]),
    ("call_tokens_missing", _report(lambda r: r["calls"][0].pop("generated_tokens")),
     ["report.json", "calls[0].generated_tokens"]),
    ("instance_capacity_str", _report(lambda r: r["instances"][0].__setitem__("kv_capacity_tokens", "big")),
     ["report.json", "instances[0].kv_capacity_tokens"]),
    ("totals_scalar", _report(lambda r: r.__setitem__("totals", "x")), ["report.json", "totals", "object"]),
    ("totals_queue_str", _report(lambda r: r["totals"].__setitem__("router_queue_at_end", "x")),
     ["report.json", "totals.router_queue_at_end"]),
    ("queue_depth_short", _report(lambda r: r["queue_depth"].__setitem__(0, [1, 2])), ["report.json", "queue_depth[0]"]),
    ("sample_missing", _telemetry("sample", lambda e: e.pop("running")), ["telemetry.jsonl:", "sample.running"]),
    ("sample_str", _telemetry("sample", lambda e: e.__setitem__("kv_used", "x")), ["telemetry.jsonl:", "sample.kv_used"]),
    ("pull_inst_missing", _telemetry("pull_start", lambda e: e.pop("inst")), ["telemetry.jsonl:", "pull_start.inst"]),
]


@pytest.mark.parametrize("name, edit, expect", RUNDIR, ids=[c[0] for c in RUNDIR])
def test_run_dir_field_of_wrong_kind_is_named(small_run, tmp_path, name, edit, expect):
    import shutil

    from click.testing import CliRunner
    from robust_common import check_clean_error, listing

    from simrl.cli.plot import cli as plot_cli

    d = tmp_path / "run"
    shutil.copytree(small_run, d)
    edit(d)
    before = listing(tmp_path)
    res = CliRunner().invoke(plot_cli, [str(d), "-o", str(tmp_path / "x.realrun.jsonl")])
    check_clean_error(res, [f"{d}/{e}" if e.startswith(("report", "telemetry")) else e for e in expect], name)
    assert listing(tmp_path) == before, sorted(listing(tmp_path) - before)


def test_sim_run_dir_given_to_compare_is_checked(small_run, tmp_path):
    import shutil

    from click.testing import CliRunner
    from robust_common import VALID_REALRUN, check_clean_error, jsonl, listing

    from simrl.cli.compare import cli as compare_cli

    d = tmp_path / "run"
    shutil.copytree(small_run, d)
    _report(lambda r: r["steps"][0].__setitem__("publish_end", "x"))(d)
    (tmp_path / "real.jsonl").write_text(jsonl(VALID_REALRUN))
    before = listing(tmp_path)
    res = CliRunner().invoke(compare_cli, [str(d), str(tmp_path / "real.jsonl"), "-o", str(tmp_path / "cmp")])
    check_clean_error(res, [f"{d}/report.json", "steps[0].publish_end"], "compare")
    assert listing(tmp_path) == before


def _study(**over) -> str:
    from robust_common import VALID_STUDY

    return _yaml(VALID_STUDY, **over)


# A research variation over a configuration key ran every seed and proposal with a misspelt key
# (silently ignored: no sign change) or a value of the wrong type (every run dropped) and exited 0;
# the key and each value are checked with the sweep axes' rule before the output folder exists.
STUDY_VARIATION = [
    ("key_typo", _study(variation={"name": "i", "key": "deployment.rollout.instancs", "values": [1, 2]}),
     ["{in}", "variation.key", "did you mean 'instances'"]),
    ("value_str", _study(variation={"name": "i", "key": "deployment.rollout.instances", "values": [1, "two"]}),
     ["{in}", "variation.values[1]", "expected an integer"]),
    ("value_range", _study(variation={"name": "i", "key": "deployment.rollout.instances", "values": [0, 1]}),
     ["{in}", "variation.values[0]", "[1, 100000]"]),
    ("value_choice", _study(variation={"name": "k", "key": "deployment.rollout.kv_policy",
                                       "values": ["reserve", "lazy"]}), ["{in}", "variation.values[1]", "on_demand"]),
]


@pytest.mark.parametrize("name, content, expect", STUDY_VARIATION, ids=[c[0] for c in STUDY_VARIATION])
def test_study_variation_key_and_values_are_checked(tmp_path, name, content, expect):
    run_input("research", content, tmp_path, expect, name)


def test_sweep_axis_key_typo_has_a_did_you_mean(tmp_path):
    run_input("sweep", _axes({"key": "deployment.rollout.max_num_seq", "grid": [1, 2]}), tmp_path,
              ["{in}", "deployment.rollout.max_num_seq", "did you mean 'max_num_seqs'"])


# Harness evidence (`srl-predict convert`): the elements of an update's group_ids, its optional
# policy_version and the records taken together were not checked: ["a"] or [0.5] was read (0.5
# truncated to group 0), a repeated call or update, phases out of order, a negative time or a
# trained group with no call gave a snapshot, exit 0.
def _ev_case(edit_updates=None, edit_turns=None):
    from test_robust_convert import TURNS, UPDATES

    u, t = copy.deepcopy(UPDATES), copy.deepcopy(TURNS)
    if edit_updates:
        u = edit_updates(u) or u
    if edit_turns:
        t = edit_turns(t) or t
    return u, t


EVIDENCE = [
    ("group_ids_str", _ev_case(lambda u: u[0].update(group_ids=["a"])), "6", ["updates.jsonl: line 1", "group_ids"]),
    ("group_ids_float", _ev_case(lambda u: u[0].update(group_ids=[0.5])), "6", ["updates.jsonl: line 1", "group_ids"]),
    ("group_ids_unknown", _ev_case(lambda u: u[0].update(group_ids=[99])), "6",
     ["updates.jsonl: line 1", "group 99 has no call"]),
    ("policy_version_str", _ev_case(lambda u: u[0].update(policy_version="x")), "9",
     ["updates.jsonl: line 1", "policy_version"]),
    ("phases_out_of_order", _ev_case(lambda u: u[0].update(d_k=8.5)), "8.7", ["updates.jsonl: line 1", "d_k <= train_end"]),
    ("update_repeated", _ev_case(lambda u: u + u), "9", ["updates.jsonl: line 2", "repeated"]),
    ("call_repeated", _ev_case(None, lambda t: t + t[:1]), "1", ["turns.jsonl: line 5", "repeated"]),
    ("arrival_negative", _ev_case(None, lambda t: t[0].update(arrival=-1.0)), "1", ["turns.jsonl: line 1", "arrival",
                                                                                  ">= 0"]),
]


@pytest.mark.parametrize("name, records, at, expect", EVIDENCE, ids=[c[0] for c in EVIDENCE])
def test_harness_evidence_records_are_checked(tmp_path, name, records, at, expect):
    from click.testing import CliRunner
    from robust_common import check_clean_error
    from test_robust_convert import SMALL

    from simrl.cli.predict import main as predict_cli

    ev = tmp_path / "ev"
    ev.mkdir()
    for fname, recs in zip(("updates.jsonl", "turns.jsonl"), records, strict=True):
        (ev / fname).write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "snap.json"
    res = CliRunner().invoke(predict_cli, ["convert", str(ev), "--at", at, "-o", str(out), *SMALL,
                                           "--set", "policy=skyrl"])
    check_clean_error(res, [f"{ev}/{e}" if e.startswith(("turns", "updates")) else e for e in expect], name)
    assert not out.exists()


# srl-profile's comma-separated options skipped empty items ("1,,2", a trailing comma; an empty
# --tokens silently used the default grid) and had no bounds: 1e400 or a 23-digit size was an
# OverflowError traceback, a huge world size started that many processes. One reader
# (`adapters.listopt`) for every list option.
LIST_OPTIONS = [
    (["kernels", "--model", "qwen3-8b", "--tokens", "1,,16", "-o", "{tmp}/k.jsonl"], ["--tokens", "item 2 is empty"]),
    (["kernels", "--model", "qwen3-8b", "--tokens", "", "-o", "{tmp}/k.jsonl"], ["--tokens", "empty"]),
    (["kernels", "--model", "qwen3-8b", "--tokens", "99999999999999999999", "-o", "{tmp}/k.jsonl"],
     ["--tokens", "out of range"]),
    (["kernels", "--model", "qwen3-8b", "--ops", "add,", "-o", "{tmp}/k.jsonl"], ["--ops", "item 2 is empty"]),
    (["fsdp", "--model", "qwen3-8b", "--world-sizes", "1000000", "-o", "{tmp}/f.jsonl"],
     ["--world-sizes", "[1, 4096]"]),
    (["fsdp", "--model", "qwen3-8b", "--seq-lens", "64,", "-o", "{tmp}/f.jsonl"], ["--seq-lens", "item 2 is empty"]),
    (["weight-sync", "--sizes-mb", "1e400", "-o", "{tmp}/w.jsonl"], ["--sizes-mb", "out of range"]),
    (["weight-sync", "--sizes-mb", "nan", "-o", "{tmp}/w.jsonl"], ["--sizes-mb", "out of range"]),
    (["weight-sync", "--instances", "99999999999999999999999", "-o", "{tmp}/w.jsonl"], ["--instances", "out of range"]),
    (["weight-sync", "--method", "broadcast,,filesystem", "-o", "{tmp}/w.jsonl"], ["--method", "item 2 is empty"]),
    (["megatron", "--model", "qwen3-8b", "--layouts", "tp99999", "-o", "{tmp}/m.jsonl"], ["--layouts", "[1, 4096]"]),
    (["megatron", "--model", "qwen3-8b", "--seq-lengths", "", "-o", "{tmp}/m.jsonl"], ["--seq-lengths", "empty"]),
    (["vllm", "--model", "qwen3-8b", "--scenarios", "1x99999999999x1", "-o", "{tmp}/v.jsonl"], ["--scenarios"]),
]


@pytest.mark.parametrize("argv, expect", LIST_OPTIONS, ids=[f"{c[0][0]}-{c[0][-3]}-{c[0][-2][:12]}" for c in LIST_OPTIONS])
def test_profile_list_option_is_checked(tmp_path, argv, expect):
    from robust_common import run_args

    from adapters.cli import cli as profile_cli

    run_args(profile_cli, argv, tmp_path, expect, " ".join(argv))


# An integer generator knob outside the 64-bit range (a typo with extra digits, or 1e300 written
# as a whole number) was an OverflowError traceback inside the numpy draw; refused by name.
@pytest.mark.parametrize("knob", ["max_completion=99999999999999999999", "max_completion=-99999999999999999999"])
def test_generator_integer_knob_is_in_the_64_bit_range(tmp_path, knob):
    from robust_common import run_args

    from simrl.cli.workload import main as workload_cli

    run_args(workload_cli, ["synth", "rl_math", "-o", "{tmp}/w.jsonl", knob], tmp_path,
             ["max_completion", "64-bit range"], knob)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """A VALID bench results directory (the synthetic backend through the real run path, as
    tests/harness/conftest.py makes it)."""
    import importlib.util
    from pathlib import Path

    here = Path(__file__).resolve().parents[1] / "harness" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_harness_conftest_for_robustness", here)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from harness.run import RunRequest, run_one

    root = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as mp:
        mod._fake_env(mp, root)
        mod._synthetic(mp)
        req = RunRequest(backend="skyrl", workload="multi_turn", gpus="0,1,2,3", runtime="sim",
                         results_dir=str(root / "results"), argv=("bench", "run"))
        run_dir, man = run_one(req, echo=lambda m: None)
    assert man["status"] == "valid", man["reasons"]
    return run_dir


# A bench manifest's pipeline.native_config of the wrong type, or a GPU UUID list holding a
# number, was an AttributeError / TypeError traceback in `bench validate` and `bench report`; the
# manifest reader checks the type of those keys and of the elements of the lists validation reads.
MANIFEST = [
    ("native_config_str", lambda m: m["pipeline"].__setitem__("native_config", "x"),
     ["manifest.json", "pipeline.native_config", "object"]),
    ("native_config_list", lambda m: m["pipeline"].__setitem__("native_config", [1]), ["pipeline.native_config"]),
    ("trainer_uuids_int", lambda m: m["hardware"].__setitem__("trainer_uuids", [1, "GPU-x"]),
     ["hardware.trainer_uuids[0]", "string"]),
    ("inference_uuids_int", lambda m: m["hardware"]["inference_uuids"].append(7),
     ["hardware.inference_uuids[", "string"]),
]


@pytest.mark.parametrize("command", ["validate", "report"])
@pytest.mark.parametrize("name, edit, expect", MANIFEST, ids=[c[0] for c in MANIFEST])
def test_bench_manifest_value_of_wrong_type_is_named(bench_run, tmp_path, command, name, edit, expect):
    import shutil

    from click.testing import CliRunner
    from robust_common import check_clean_error

    from harness.cli import main as bench_cli

    d = tmp_path / bench_run.name
    shutil.copytree(bench_run, d)
    man = json.loads((d / "manifest.json").read_text())
    edit(man)
    (d / "manifest.json").write_text(json.dumps(man))
    res = CliRunner().invoke(bench_cli, [command, str(d)])
    check_clean_error(res, [f"{d}/{e}" if e == "manifest.json" else e for e in expect], f"{command}/{name}")


def _snap(edit) -> str:
    from robust_common import valid_snapshot

    d = valid_snapshot()
    edit(d)
    return json.dumps(d)


# A snapshot's workload (generator, knobs) was first used when the predictor redrew it: a
# ValueError traceback mid-prediction. A group tag the policy keeps (psrl's reserved buffer) of
# the wrong type or missing was a TypeError / KeyError traceback. Both are checked when the
# snapshot is read.
SNAPSHOT = [
    ("generator_typo", _snap(lambda d: d["config"]["workload"].update(generator="rl_mth")),
     ["{in}", "config.workload", "did you mean 'rl_math'"]),
    ("knob_str", _snap(lambda d: d["config"]["workload"]["knobs"].update(max_completion="x")),
     ["{in}", "config.workload", "max_completion"]),
    ("knob_range", _snap(lambda d: d["config"]["workload"]["knobs"].update(max_completion=-1)),
     ["{in}", "config.workload", "max_completion", ">= 1"]),
    ("knob_unknown", _snap(lambda d: d["config"]["workload"]["knobs"].update(max_completon=5)),
     ["{in}", "config.workload", "did you mean 'max_completion'"]),
    ("tag_str", _snap(lambda d: d["running_groups"][0]["tag"].update(reserved="x")),
     ["{in}", "running_groups[0].tag.reserved", "integer"]),
    ("tag_missing", _snap(lambda d: d["running_groups"][0]["tag"].pop("reserved")),
     ["{in}", "running_groups[0].tag", "missing 'reserved'"]),
    ("tag_dict", _snap(lambda d: d["running_groups"][0].update(tag={"reserved": {"a": 1}, "seq": 0})),
     ["{in}", "running_groups[0].tag.reserved"]),
]


@pytest.mark.parametrize("name, content, expect", SNAPSHOT, ids=[c[0] for c in SNAPSHOT])
def test_snapshot_workload_and_group_tags_are_checked(tmp_path, name, content, expect):
    run_input("snapshot", content, tmp_path, expect, name)


def _obs(**edit) -> str:
    from robust_common import PROV, jsonl

    from simrl.cost.observations import SCHEMA

    rec = {"schema": SCHEMA, "kind": "training_step", "unit": "s", "value": 2.5, "provenance": PROV,
           "inputs": {"seq_lens": [128, 256], "tp": 1, "pp": 1, "dp": 2, "model": "qwen3-8b"}}
    for k, v in edit.items():
        (rec["inputs"] if k.startswith("in_") else rec)[k.removeprefix("in_")] = v
    return jsonl([rec])


# Observation inputs the fits read where present (zero_stage, activation_checkpointing, dtype,
# model, buckets, ...) were not typed: "x" was a ValueError traceback in the fit, "false" read as
# true; a unit given as a list or an object was a TypeError (unhashable) traceback.
OBSERVATION = [
    ("zero_stage_str", _obs(in_zero_stage="x"), ["{in}:1", "inputs.zero_stage", "0, 1, 2 or 3"]),
    ("zero_stage_7", _obs(in_zero_stage=7), ["{in}:1", "inputs.zero_stage"]),
    ("checkpointing_str", _obs(in_activation_checkpointing="false"),
     ["{in}:1", "inputs.activation_checkpointing", "true or false"]),
    ("model_list", _obs(in_model=["qwen3-8b"]), ["{in}:1", "inputs.model", "string"]),
    ("dtype_int", _obs(in_dtype=16), ["{in}:1", "inputs.dtype"]),
    ("buckets_neg", _obs(in_buckets=-1), ["{in}:1", "inputs.buckets"]),
    ("unit_list", _obs(unit=["s"]), ["{in}:1", "unit", "expected one of"]),
    ("unit_object", _obs(unit={"s": 1}), ["{in}:1", "unit"]),
    ("kind_object", _obs(kind={"a": 1}), ["{in}:1", "kind"]),
]


@pytest.mark.parametrize("name, content, expect", OBSERVATION, ids=[c[0] for c in OBSERVATION])
def test_observation_optional_input_and_enum_fields_are_typed(tmp_path, name, content, expect):
    run_input("observations", content, tmp_path, expect, name)


# A composed artifact's attention fractions divide the fitted rates: 0 was accepted as a
# "number" and the run died with ZeroDivisionError; they are checked as numbers > 0.
@pytest.mark.parametrize("key", ["attention_flops_fraction", "attention_bytes_fraction"])
def test_composed_attention_fraction_is_positive(tmp_path, key):
    from click.testing import CliRunner
    from robust_common import check_clean_error, listing

    from simrl.cli.main import cli as srl_cli

    src = tmp_path / "a.json"
    src.write_text(_artifact("rollout-composed-h100.json", lambda d: d["coefficients"].update({key: 0})))
    before = listing(tmp_path)
    res = CliRunner().invoke(srl_cli, ["run", "-o", str(tmp_path / "o"), f"cost.rollout={src}", "run.training_steps=1",
                                       "workload.groups=8"])
    check_clean_error(res, [str(src), f"coefficients.{key}", "number > 0"], key)
    assert listing(tmp_path) == before


# Finite weight-sync knobs whose product overflows (1e300 bytes per parameter; a bucket of
# 1e-300 bytes) were an OverflowError traceback at the first publication; bounded by meaning.
@pytest.mark.parametrize("override, expect", [
    ("cost.weight_sync_knobs.dtype_bytes=1e300", ["dtype_bytes", "(0, 8]"]),
    ("cost.weight_sync_knobs.bucket_bytes=1e-300", ["bucket_bytes", ">= 1"]),
])
def test_weight_sync_knob_is_bounded(tmp_path, override, expect):
    from robust_common import run_args

    from simrl.cli.main import cli as srl_cli

    run_args(srl_cli, ["run", "-o", "{tmp}/o", "run.training_steps=1", "workload.groups=8", override], tmp_path,
             expect, override)


# Outputs checked only when the results were written, after the whole sweep, study or profile:
# a file where the output directory goes (or above it), a directory where a .csv / .json goes,
# was a FileExistsError / NotADirectoryError / IsADirectoryError traceback (the study had made
# its folder). Checked before any work (srl-profile: when the command line is parsed).
def _outputs():
    from robust_common import VALID_STUDY

    from adapters.cli import cli as profile_cli
    from simrl_explore.cli_sweep import main as sweep_cli
    from simrl_explore.research.cli import main as research_cli

    space, study = ["--space", "{tmp}/space.yaml", "-q", "--jobs", "1"], ["{tmp}/study.yaml", "--jobs", "1", "-q"]
    files = {"space.yaml": _yaml(_SPACE), "study.yaml": _yaml(VALID_STUDY), "f": "x"}
    return files, [
        ("sweep_o_file", sweep_cli, [*space, "-o", "{tmp}/f"], ["{tmp}/f is a file"]),
        ("sweep_o_under_file", sweep_cli, [*space, "-o", "{tmp}/f/out"], ["{tmp}/f is a file"]),
        ("sweep_csv_under_file", sweep_cli, [*space, "-o", "{tmp}/f/rows.csv"], ["{tmp}/f is a file"]),
        ("sweep_csv_is_dir", sweep_cli, [*space, "-o", "{tmp}/d.csv"], ["d.csv", "is a directory"]),
        ("research_o_under_file", research_cli, [*study, "-o", "{tmp}/f/out"], ["{tmp}/f is a file"]),
        ("research_lessons_under_file", research_cli, [*study, "-o", "{tmp}/out", "--lessons", "{tmp}/f/l.jsonl"],
         ["--lessons", "{tmp}/f is a file"]),
        ("profile_o_under_file", profile_cli, ["weight-sync", "--sizes-mb", "1", "--instances", "1", "--repeats", "1",
                                               "--warmup", "0", "-o", "{tmp}/f/w.jsonl"], ["-o", "{tmp}/f is a file"]),
    ]


@pytest.mark.parametrize("case", range(7), ids=[c[0] for c in _outputs()[1]])
def test_output_in_the_way_is_refused_before_work(tmp_path, case):
    from robust_common import run_args

    files, cases = _outputs()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "d.csv").mkdir()
    name, cli, argv, expect = cases[case]
    run_args(cli, argv, tmp_path, expect, name)
