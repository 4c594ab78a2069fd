"""The checked-in corpus of malformed inputs: one entry per case, by format.

Each case is ``(name, content, expected)``: ``content`` is the file (text or bytes), or a
function of the format's valid records that returns it; ``expected`` are substrings the error
must contain (``{in}`` is the input file's path), naming where the problem is. Option cases
(`OPTIONS`) are command lines. The classes come from issue 16: wrong types, NaN and infinity,
huge integers, duplicate keys, misspelt fields, binary and non-UTF-8 bytes, broken syntax,
impossible deployments, missing data, unwritable outputs.
"""

from __future__ import annotations

import copy
import json
import re

import yaml
from robust_common import (
    VALID_CONFIG,
    VALID_OBSERVATION,
    VALID_REALRUN,
    VALID_SPLITWISE,
    VALID_STUDY,
    VALID_TURNS,
    jsonl,
    valid_artifact_text,
    valid_snapshot,
    valid_trace_text,
)

BINARY = bytes(range(256)) * 4


def cfg(**sections) -> str:
    """The valid config with sections deep-merged from ``sections`` (YAML text)."""
    data = copy.deepcopy(VALID_CONFIG)

    def merge(base, over):
        for k, v in over.items():
            if isinstance(v, dict) and isinstance(base.get(k), dict):
                merge(base[k], v)
            else:
                base[k] = v

    merge(data, sections)
    return yaml.safe_dump(data, sort_keys=False)


CONFIG = [
    ("float_for_int", cfg(deployment={"rollout": {"instances": 2.7}}), ["deployment.rollout.instances", "{in}:"]),
    ("string_false", cfg(run={"plots": "false"}), ["run.plots", "true or false"]),
    ("string_number", cfg(run={"seed": "3"}), ["run.seed", "without quotes"]),
    ("bool_for_int", cfg(run={"training_steps": True}), ["run.training_steps"]),
    ("nan_horizon", cfg(run={"time_horizon_s": float("nan")}), ["run.time_horizon_s", "finite"]),
    ("neg_inf_util", cfg(deployment={"rollout": {"gpu_memory_utilization": float("-inf")}}),
     ["deployment.rollout.gpu_memory_utilization"]),
    ("huge_seed", "run:\n  seed: 99999999999999999999999\n", ["run.seed", "64-bit"]),
    ("duplicate_key", "deployment:\n  rollout:\n    tp: 2\n  rollout:\n    tp: 4\n", ["{in}:4", "duplicate key"]),
    ("duplicate_top", "run:\n  seed: 1\nrun:\n  seed: 2\n", ["{in}:3", "duplicate key 'run'"]),
    ("typo_section", "deployment:\n  rolout:\n    tp: 2\n", ["deployment.rolout", "did you mean 'rollout'"]),
    ("typo_top", "deploymnet:\n  model: qwen3-8b\n", ["deploymnet", "did you mean 'deployment'"]),
    ("typo_policy_kind", "policy: bounded_asyn\n", ["policy", "did you mean 'bounded_async'"]),
    ("typo_policy_knob", "policy:\n  kind: bounded_async\n  max_stalenes: 2\n",
     ["policy.max_stalenes", "did you mean 'max_staleness'"]),
    ("policy_without_kind", "policy:\n  max_staleness: 1\n", ["policy", "kind"]),
    ("tp_heads", cfg(deployment={"rollout": {"tp": 3}}), ["deployment.rollout.tp", "attention heads"]),
    ("training_tp_kv", cfg(deployment={"training": {"gpus": 16, "tp": 16}}), ["deployment.training.tp", "KV heads"]),
    ("pp_layers", cfg(deployment={"rollout": {"pp": 64}}), ["deployment.rollout.pp", "layers"]),
    ("ep_dense", cfg(deployment={"rollout": {"ep": 2, "dp": 2}}), ["deployment.rollout.ep", "MoE"]),
    ("colocated_gpus", cfg(deployment={"placement": "colocated", "rollout": {"instances": 9}}),
     ["deployment.rollout.instances", "colocated"]),
    ("colocated_gpu_type", cfg(deployment={"placement": "colocated", "rollout": {"gpu": "H200"}}),
     ["deployment.rollout.gpu", "colocated"]),
    ("unknown_model", cfg(deployment={"model": "qwen3-8x"}), ["deployment.model", "unknown model"]),
    ("weights_rollout", cfg(deployment={"model": "meta-llama/Llama-3.1-70B", "training": {"gpus": 8, "tp": 8}}),
     ["deployment.rollout.tp", "GiB"]),
    ("weights_training", cfg(deployment={"model": "meta-llama/Llama-3.1-70B", "rollout": {"tp": 4},
                                         "training": {"gpus": 1, "tp": 1}}), ["deployment.training.gpus", "GiB"]),
    ("gpu_typo", cfg(deployment={"rollout": {"gpu": "H1OO"}}), ["deployment.rollout.gpu", "did you mean 'H100'"]),
    ("not_divisible", cfg(deployment={"training": {"gpus": 7, "tp": 2}}), ["deployment.training", "divisible"]),
    ("instances_huge", cfg(deployment={"rollout": {"instances": 10**9}}), ["deployment.rollout.instances"]),
    ("util_range", cfg(deployment={"rollout": {"gpu_memory_utilization": 1.5}}),
     ["deployment.rollout.gpu_memory_utilization"]),
    ("router_name", cfg(router={"name": "fastest"}), ["router.name"]),
    ("knob_inf", cfg(cost={"rollout_knobs": {"overhead_s": float("inf")}}), ["cost.rollout_knobs.overhead_s"]),
    ("knob_nan_nested", cfg(workload={"knobs": {"calls": [1, float("nan")]}}), ["workload.knobs.calls[1]"]),
    ("groups_negative", cfg(workload={"groups": -1}), ["workload.groups"]),
    ("kv_policy_int", cfg(deployment={"rollout": {"kv_policy": 3}}), ["deployment.rollout.kv_policy"]),
    ("section_scalar", "deployment: 5\n", ["deployment", "mapping"]),
    ("name_int", cfg(run={"name": 123}), ["run.name", "string"]),
    # run.name is the run directory's name: a path in it wrote outside -o (or into -o itself)
    ("name_traversal", cfg(run={"name": "../escaped"}), ["run.name", "one path component"]),
    ("name_dot", cfg(run={"name": "."}), ["run.name", "one path component"]),
    ("name_nested", cfg(run={"name": "a/b"}), ["run.name", "'/'"]),
    ("name_newline", cfg(run={"name": "a\nb"}), ["run.name", "control characters"]),
    ("name_too_long", cfg(run={"name": "x" * 300}), ["run.name", "at most 200 bytes"]),
    ("name_empty", cfg(run={"name": ""}), ["run.name", "non-empty"]),
    ("top_list", "- 1\n- 2\n", ["{in}", "top level"]),
    ("bad_yaml", "a: [1,\n", ["{in}:", "not valid YAML"]),
    ("tab_indent", "deployment:\n\trollout: 1\n", ["{in}:", "not valid YAML"]),
    ("alias", "run:\n  seed: &s 1\n  training_steps: *s\n", ["{in}:3", "alias"]),
    ("complex_key", "? [a, b]\n: 1\n", ["{in}:1", "key"]),
    ("binary", BINARY, ["{in}:1", "binary file"]),
    ("latin1", "deployment:\n  model: caf\xe9\n".encode("latin-1"), ["{in}:2", "UTF-8"]),
    ("nul_byte", "run:\n  seed: 1\x00\n", ["{in}:2", "NUL"]),
]


def _tk(**knobs) -> str:
    return cfg(cost={"training": "analytical", "training_knobs": knobs})


def _rk(**knobs) -> str:
    return cfg(cost={"rollout_knobs": knobs})


def _co(**knobs) -> str:
    return cfg(deployment={"placement": "colocated"}, cost={"colocated_knobs": knobs})


# Knobs of the cost builders (simrl.cost.family.construct): each bad value is named by its config
# key; wrong types by the field's annotation (a string is not a number, "false" is not false).
CONFIG += [
    ("knob_moe_host_str", _tk(moe_host_s_per_layer="abc"), ["cost.training_knobs.moe_host_s_per_layer", "number"]),
    ("knob_moe_host_neg", _tk(moe_host_s_per_layer=-1.0), ["cost.training_knobs.moe_host_s_per_layer", ">= 0"]),
    ("knob_moe_imbalance", _tk(moe_imbalance=0.5), ["cost.training_knobs.moe_imbalance", ">= 1"]),
    ("knob_moe_dispatcher", _tk(moe_token_dispatcher_type="deepep"),
     ["cost.training_knobs.moe_token_dispatcher_type", "alltoall", "flex"]),
    ("knob_moe_a2a_eff", _tk(moe_alltoall_efficiency=1.5), ["cost.training_knobs.moe_alltoall_efficiency"]),
    ("knob_moe_imbalance_str", _tk(moe_imbalance="1.2"), ["cost.training_knobs.moe_imbalance", "without quotes"]),
    ("knob_fsdp_float", _tk(fsdp_shard_size=2.5), ["cost.training_knobs.fsdp_shard_size", "integer"]),
    ("knob_fsdp_zero", _tk(fsdp_shard_size=0), ["cost.training_knobs.fsdp_shard_size"]),
    ("knob_fsdp_zero1", _tk(fsdp_shard_size=2), ["cost.training_knobs.fsdp_shard_size", "zero_stage=3"]),
    ("knob_fsdp_divide", cfg(deployment={"training": {"zero_stage": 3}},
                             cost={"training": "analytical", "training_knobs": {"fsdp_shard_size": 3}}),
     ["cost.training_knobs.fsdp_shard_size", "divide"]),
    ("knob_dp_balance", _tk(dp_balance="batchh"), ["cost.training_knobs.dp_balance", "minibatch"]),
    ("knob_mini_batch_zero", _tk(mini_batch_samples=0), ["cost.training_knobs.mini_batch_samples"]),
    ("knob_mini_batch_str", _tk(mini_batch_samples="8"), ["cost.training_knobs.mini_batch_samples", "integer"]),
    ("knob_ppo_epochs_neg", _tk(ppo_epochs=-1), ["cost.training_knobs.ppo_epochs"]),
    ("knob_ppo_epochs_bool", _tk(ppo_epochs=True), ["cost.training_knobs.ppo_epochs", "integer"]),
    ("knob_critic_str", _tk(critic="false"), ["cost.training_knobs.critic", "true or false"]),
    ("knob_mfu_str", _tk(mfu="0.4"), ["cost.training_knobs.mfu", "number"]),
    ("knob_tile_float", _tk(moe_gemm_tile_rows=1.5), ["cost.training_knobs.moe_gemm_tile_rows"]),
    ("knob_eager_str", _rk(enforce_eager="false"), ["cost.rollout_knobs.enforce_eager", "true or false"]),
    ("knob_eager_int", _rk(enforce_eager=1), ["cost.rollout_knobs.enforce_eager", "true or false"]),
    ("knob_launch_neg", _rk(eager_launch_s=-1e-6), ["cost.rollout_knobs.eager_launch_s"]),
    ("knob_launch_str", _rk(eager_launch_s="0.5"), ["cost.rollout_knobs.eager_launch_s", "number"]),
    ("knob_launch_list", _rk(eager_launch_s=[1]), ["cost.rollout_knobs.eager_launch_s", "number"]),
    ("coloc_refit", _co(refit="fsdpp"), ["cost.colocated_knobs.refit"]),
    ("coloc_dtype", _co(refit_dtype_bytes=3), ["cost.colocated_knobs.refit_dtype_bytes"]),
    ("coloc_transport", _co(refit_transport=3), ["cost.colocated_knobs.refit_transport"]),
    ("coloc_typo", _co(refti=1), ["cost.colocated_knobs.refti"]),
    ("weight_sync_typo", cfg(cost={"weight_sync": "filesytem"}), ["cost.weight_sync", "filesystem"]),
    ("trigger_sync_zero", cfg(deployment={"training": {"trigger_parameter_sync_step": 0}}),
     ["deployment.training.trigger_parameter_sync_step"]),
    ("test_freq_neg", cfg(deployment={"training": {"test_freq": -1}}), ["deployment.training.test_freq"]),
    ("validation_nan", cfg(deployment={"training": {"validation_s": float("nan")}}),
     ["deployment.training.validation_s"]),
    ("reward_s_inf", cfg(deployment={"training": {"reward_s_per_trajectory": float("inf")}}),
     ["deployment.training.reward_s_per_trajectory"]),
    ("drift_knots_flat", cfg(workload={"knobs": {"length_drift_knots": [1, 2]}}), ["length_drift_knots"]),
    ("drift_knots_order", cfg(workload={"knobs": {"length_drift_knots": [[5, 1.0], [2, 2.0]]}}),
     ["length_drift_knots"]),
    ("drift_growth_to_zero", cfg(workload={"knobs": {"length_growth_per_step": -0.6}}),
     ["workload.knobs.length_growth_per_step", "run.training_steps"]),
    ("drift_both", cfg(workload={"knobs": {"length_growth_per_step": 0.1, "length_drift_knots": [[0, 1.0]]}}),
     ["length_drift_knots"]),
]


def _space(**over) -> str:
    data = {"name": "t", "base": {"set": {"deployment.model": "qwen3-8b", "run.training_steps": 1}},
            "axes": [{"name": "inst", "key": "deployment.rollout.instances", "grid": [1, 2]}],
            "engine": "simpy", "surrogate": "off", "top_k": 0}
    data.update(over)
    return yaml.safe_dump(data, sort_keys=False)


def _lhs(**dist) -> str:
    return _space(axes=[{"name": "m", "key": "deployment.rollout.max_num_seqs", "lhs": dist}], samples=2)


# `srl-sweep --space FILE`: refused while the space is read, before any point runs.
SWEEP = [
    ("empty", "", ["{in}", "top level"]),
    ("latin1", "name: caf\xe9\n".encode("latin-1"), ["{in}:1", "UTF-8"]),
    ("nul_byte", "name: a\x00\n", ["{in}:1", "NUL"]),
    ("binary", BINARY, ["{in}:1"]),
    ("bad_yaml", "axes: [1,\n", ["{in}", "YAML"]),
    ("duplicate_key", "name: a\nname: b\n", ["{in}", "line 2", "repeated"]),
    ("samples_bool", _space(samples=True), ["samples", "whole number"]),
    ("seed_bool", _space(seed=True), ["seed", "whole number"]),
    ("seed_huge", _space(seed=10**30), ["seed", "whole number"]),
    ("top_k_bool", _space(top_k=True), ["top_k", "whole number"]),
    ("tolerance_inf", _space(recheck_tolerance=float("inf")), ["recheck_tolerance", "finite"]),
    ("tolerance_nan", _space(recheck_tolerance=float("nan")), ["recheck_tolerance", "finite"]),
    ("lhs_log_string", _lhs(low=1, high=8, log="false"), ["lhs.log", "true or false"]),
    ("lhs_integer_string", _lhs(low=1, high=8, integer="no"), ["lhs.integer", "true or false"]),
    ("random_low_inf", _space(axes=[{"name": "m", "key": "deployment.rollout.max_num_seqs",
                                     "random": {"low": float("-inf"), "high": 8}}], samples=2),
     ["random.low", "finite"]),
    ("lhs_low_bool", _lhs(low=True, high=8), ["lhs.low"]),
    ("key_typo", _space(axes=[{"name": "i", "key": "deployment.rolout.instances", "grid": [1, 2]}]),
     ["deployment.rolout"]),
    ("set_typo", _space(base={"set": {"deployment.modle": "qwen3-8b"}}), ["deployment.modle", "did you mean"]),
    ("top_typo", _space(axis=[]), ["axis", "unknown key"]),
    ("axes_mapping", _space(axes={"a": 1}), ["axes", "list"]),
    ("engine_enum", _space(engine="fastt"), ["engine"]),
    ("checks_string", _space(checks="heads"), ["checks"]),
    ("derived_syntax", _space(derived=[{"name": "x", "expr": "inst +"}]), ["derived[0].expr"]),
    ("base_config_missing", _space(base={"config": "nope.yaml"}), ["nope.yaml", "cannot read"]),
    ("name_list", _space(name=[1]), ["name", "string"]),
]


OVERRIDES = [
    ("ov_float_for_int", ["deployment.rollout.instances=2.7"], ["deployment.rollout.instances"]),
    ("ov_string_false", ['run.plots="false"'], ["run.plots"]),
    ("ov_nan", ["run.time_horizon_s=.nan"], ["run.time_horizon_s"]),
    ("ov_huge", ["run.seed=99999999999999999999999"], ["run.seed"]),
    ("ov_typo", ["deployment.rollot.tp=2"], ["deployment.rollot", "did you mean 'rollout'"]),
    ("ov_policy_typo", ["policy=verll"], ["policy", "did you mean 'verl'"]),
    ("ov_no_value", ["novalue"], ["novalue", "KEY=VALUE"]),
    ("ov_empty_key", ["=3"], ["empty key"]),
    ("ov_empty_part", ["deployment..tp=2"], ["deployment..tp"]),
    ("ov_section_value", ["deployment.rollout=3"], ["deployment.rollout"]),
    ("ov_through_value", ["run.seed.x=3"], ["run.seed"]),
    ("ov_bad_flow", ["cost.rollout_knobs.a=[1,"], ["cost.rollout_knobs.a"]),
    ("ov_policy_knob", ["policy=bounded_async", "policy.max_staleness=-1"], ["policy.max_staleness"]),
    ("ov_knob_inf", ["cost.rollout_knobs.a=.inf"], ["cost.rollout_knobs.a"]),
    ("ov_tp_heads", ["deployment.rollout.tp=5"], ["deployment.rollout.tp"]),
    ("ov_name_dotdot", ["run.name=.."], ["run.name", "one path component"]),
]


def _trace(edit):
    """A malformed trace made from the valid one by ``edit(records) -> lines``."""
    def make():
        recs = [json.loads(line) for line in valid_trace_text().splitlines()]
        return "\n".join(edit(recs)) + "\n"
    return make


def _set(line: int, path: tuple, value, raw: str | None = None):
    """Set records[line-1][path...] = value (``raw``: JSON text spliced in instead)."""
    def edit(recs):
        node = recs[line - 1]
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = "@@RAW@@" if raw is not None else value
        out = [json.dumps(r) for r in recs]
        if raw is not None:
            out[line - 1] = out[line - 1].replace('"@@RAW@@"', raw)
        return out
    return edit


def _lines(fn):
    def edit(recs):
        return fn([json.dumps(r) for r in recs])
    return edit


TRACE = [
    ("float_prompt", _trace(_set(2, ("trajectories", 0, "prompt_tokens", 0), 2.5)),
     ["{in}:2", "prompt_tokens"]),
    ("nan_reward", _trace(_set(2, ("trajectories", 1, "reward"), None, "NaN")), ["{in}:2", "reward"]),
    ("inf_latency", _trace(_set(3, ("trajectories", 0, "tool_latency_s"), None, "[Infinity, 0]")),
     ["{in}:3", "tool_latency_s"]),
    ("huge_int", _trace(_set(3, ("trajectories", 0, "completion_tokens", 0), None, "123456789012345678901234")),
     ["{in}:3", "completion_tokens", "64-bit"]),
    ("tokens_2_50", _trace(_set(2, ("trajectories", 0, "completion_tokens", 1), 2**50)),
     ["{in}:2", "completion_tokens", "at most"]),
    ("latency_1e12", _trace(_set(3, ("trajectories", 1, "tool_latency_s"), [1e12, 0.0])),
     ["{in}:3", "tool_latency_s", "at most"]),
    ("bool_reward", _trace(_set(2, ("trajectories", 0, "reward"), True)), ["{in}:2", "reward"]),
    ("int_salted", _trace(_set(2, ("trajectories", 0, "cache_salted"), [1, 0])), ["{in}:2", "cache_salted"]),
    ("group_float", _trace(_set(3, ("group",), 1.0)), ["{in}:3", "group"]),
    ("zero_completion", _trace(_set(4, ("trajectories", 1, "completion_tokens", 1), 0)),
     ["{in}:4", "completion_tokens"]),
    ("neg_latency", _trace(_set(2, ("trajectories", 0, "tool_latency_s"), [-1.0, 0.0])),
     ["{in}:2", "tool_latency_s"]),
    ("typo_traj_field", _trace(_set(2, ("trajectories", 0, "tool_latncy_s"), [0.0, 0.0])),
     ["{in}:2", "did you mean 'tool_latency_s'"]),
    ("typo_group_field", _trace(_set(3, ("shared_prompt_token",), 0)),
     ["{in}:3", "did you mean 'shared_prompt_tokens'"]),
    ("typo_header_field", _trace(_set(1, ("group_sizes",), 2)), ["{in}:1", "did you mean 'group_size'"]),
    ("wrong_schema", _trace(_set(1, ("schema",), "simrl.trace.v0")), ["{in}:1", "schema"]),
    ("header_groups", _trace(_set(1, ("groups",), 7)), ["{in}:1", "groups"]),
    ("sha_edited", _trace(_set(1, ("schedule_sha256",), "0" * 64)), ["{in}:1", "schedule_sha256"]),
    ("new_tokens_wrong", _trace(_set(2, ("trajectories", 0, "new_tokens", 1), 1)), ["{in}:2", "new_tokens"]),
    ("empty_trajs", _trace(_set(2, ("trajectories",), [])), ["{in}:2", "trajectories"]),
    ("dup_key", _trace(_lines(lambda ls: [ls[0], ls[1], ls[2].replace("{", '{"group": 1, ', 1), *ls[3:]])),
     ["{in}:3", "duplicate key"]),
    ("truncated", _trace(_lines(lambda ls: [*ls[:3], ls[3][: len(ls[3]) // 2]])), ["{in}:4", "not valid JSON"]),
    ("list_line", _trace(_lines(lambda ls: [*ls[:2], "[1, 2]", *ls[3:]])), ["{in}:3", "object"]),
    ("header_late", _trace(_lines(lambda ls: [*ls[1:3], ls[0], *ls[3:]])), ["{in}:3", "header"]),
    ("deep_nesting", _trace(_lines(lambda ls: [ls[0], "[" * 100000 + "]" * 100000])), ["{in}:2"]),
    ("bad_byte", lambda: valid_trace_text().encode().replace(b'"reward"', b'"rew\xffard"', 1),
     ["{in}:2", "UTF-8"]),
    ("binary", BINARY, ["{in}:1", "binary file"]),
    ("empty", "", ["{in}", "no group records"]),
]


SPLITWISE = [
    ("header_typo", "arrived_at,num_prefil_tokens,num_decode_tokens\n0.0,1,1\n",
     ["{in}:1", "did you mean 'num_prefill_tokens'"]),
    ("header_extra", "arrived_at,num_prefill_tokens,num_decode_tokens,x\n0.0,1,1,1\n", ["{in}:1", "'x'"]),
    ("text_cell", VALID_SPLITWISE + "6.0,abc,5\n", ["{in}:5", "num_prefill_tokens"]),
    ("float_cell", VALID_SPLITWISE + "6.0,12.5,5\n", ["{in}:5", "num_prefill_tokens"]),
    ("float_whole", VALID_SPLITWISE + "6.0,12,5.0\n", ["{in}:5", "num_decode_tokens"]),
    ("huge_cell", VALID_SPLITWISE + "6.0,99999999999999999999,5\n", ["{in}:5", "num_prefill_tokens"]),
    ("negative", VALID_SPLITWISE + "6.0,-5,5\n", ["{in}:5", "num_prefill_tokens"]),
    ("zero", VALID_SPLITWISE + "6.0,0,5\n", ["{in}:5", "num_prefill_tokens"]),
    ("missing_column", VALID_SPLITWISE + "6.0,10\n", ["{in}:5", "columns"]),
    ("extra_column", VALID_SPLITWISE + "6.0,10,5,7\n", ["{in}:5", "columns"]),
    ("nan_arrival", VALID_SPLITWISE + "nan,10,5\n", ["{in}:5", "arrived_at"]),
    ("latin1", (VALID_SPLITWISE + "6.0,10,5\n").encode() + b"7.0,1\xe9,5\n", ["{in}:6", "UTF-8"]),
    ("empty", "", ["{in}", "empty"]),
    ("binary", BINARY, ["{in}:1"]),
    ("bad_quote", VALID_SPLITWISE + '6.0,"10,5\n', ["{in}"]),
]


def _obs(**over):
    rec = copy.deepcopy(VALID_OBSERVATION)
    rec.update(over)
    return rec


def _obs_inputs(**over):
    return _obs(inputs={**VALID_OBSERVATION["inputs"], **over})


OBSERVATIONS = [
    ("nan_value", jsonl([_obs(value=float("nan"))]), ["{in}:1", "value"]),
    ("inf_spread", jsonl([_obs(spread=float("inf"))]), ["{in}:1", "spread"]),
    ("dup_key", '{"value": 1, ' + json.dumps(_obs())[1:] + "\n", ["{in}:1", "duplicate key 'value'"]),
    ("typo_field", jsonl([{**_obs(), "valeu": 3}]), ["{in}:1", "did you mean 'value'"]),
    ("kind_typo", jsonl([_obs(kind="iteratoin")]), ["{in}:1", "kind"]),
    ("unit_typo", jsonl([_obs(unit="sec")]), ["{in}:1", "unit"]),
    ("string_input", jsonl([_obs_inputs(batch_size="4")]), ["{in}:1", "inputs.batch_size"]),
    ("float_count", jsonl([_obs_inputs(batch_size=4.0)]), ["{in}:1", "inputs.batch_size", "integer"]),
    ("bool_input", jsonl([_obs_inputs(kv_tokens=True)]), ["{in}:1", "inputs.kv_tokens"]),
    ("missing_inputs", jsonl([{k: v for k, v in _obs().items() if k != "inputs"}]), ["{in}:1", "inputs"]),
    ("negative_value", jsonl([_obs(value=-1)]), ["{in}:1", "value"]),
    ("bool_value", jsonl([_obs(value=True)]), ["{in}:1", "value"]),
    ("huge_input", json.dumps(_obs()).replace('"batch_size": 4', '"batch_size": 1' + "0" * 30) + "\n",
     ["{in}:1", "batch_size"]),
    ("no_provenance", jsonl([{k: v for k, v in _obs().items() if k != "provenance"}]), ["{in}:1", "provenance"]),
    ("second_line_byte", jsonl([_obs()]).encode() + b'{"schema": "\xfe"}\n', ["{in}:2", "UTF-8"]),
    ("not_json", "{schema: observation}\n", ["{in}:1", "not valid JSON"]),
    ("list_record", "[1, 2]\n", ["{in}:1", "object"]),
    ("binary", BINARY, ["{in}:1"]),
]


def _rr(step_edits=None, header=None, drop=None):
    recs = copy.deepcopy(VALID_REALRUN)
    if header:
        recs[0].update(header)
    for i, edit in (step_edits or {}).items():
        recs[i].update(edit)
    if drop:
        recs = [r for i, r in enumerate(recs) if i != drop]
    return jsonl(recs)


REALRUN = [
    ("no_header", jsonl(VALID_REALRUN[1:]), ["{in}:1", "schema"]),
    ("header_typo", _rr(header={"sytem": "x"}), ["{in}:1", "did you mean 'system'"]),
    ("step_typo", _rr({1: {"trained_token": 5}}), ["{in}:2", "did you mean 'trained_tokens'"]),
    ("load_typo", _rr({1: {"load": [{"t": 0.0, "instance": 0, "runing": 1, "waiting": 0}]}}),
     ["{in}:2", "did you mean 'running'"]),
    ("nan_start", _rr({1: {"start": float("nan")}}), ["{in}:2", "start"]),
    ("inf_end", _rr({2: {"end": float("inf")}}), ["{in}:3", "end"]),
    ("float_tokens", _rr({1: {"generated_tokens": 2.5}}), ["{in}:2", "generated_tokens"]),
    ("huge_tokens", _rr({1: {"trained_tokens": 10**25}}), ["{in}:2", "trained_tokens"]),
    ("bool_step", _rr({1: {"step": True}}), ["{in}:2", "step"]),
    ("missing_step", _rr({2: {"step": 3}}), ["{in}:3", "step"]),
    ("end_before_start", _rr({1: {"end": -1.0}}), ["{in}:2", "end"]),
    ("phases_too_long", _rr({1: {"train_s": 100.0}}), ["{in}:2", "train_s"]),
    ("staleness_mean_max", _rr({1: {"staleness": {"mean": 3.0, "max": 1}}}), ["{in}:2", "staleness.mean"]),
    ("dup_key", _rr().replace('{"step": 2,', '{"step": 2, "step": 2,', 1), ["{in}:3", "duplicate key 'step'"]),
    ("bad_byte", _rr().encode().replace(b'"robustness"', b'"robust\xffness"'), ["{in}:1", "UTF-8"]),
    ("empty", "", ["{in}", "empty"]),
]


def _turns(edit=None, drop=None, extra=None):
    recs = copy.deepcopy(VALID_TURNS)
    for i, e in (edit or {}).items():
        recs[i].update(e)
    recs = [r for i, r in enumerate(recs) if i != drop] + (extra or [])
    return jsonl(recs)


COLLECT = [
    ("missing_turn", _turns(extra=[{"group": 0, "trajectory": 0, "turn": 3, "prompt_tokens": 400,
                                    "completion_tokens": 5}]), ["{in}:5", "turn 2", "missing"]),
    ("missing_first_turn", _turns(edit={2: {"turn": 1}}, drop=3), ["{in}:3", "turn 0 is missing"]),
    ("turn_typo", _turns(edit={0: {"trun": 0}}), ["{in}:1", "did you mean 'turn'"]),
    ("field_typo", _turns(edit={1: {"tool_latncy_s": 0.5}}), ["{in}:2", "did you mean 'tool_latency_s'"]),
    ("dup_key", jsonl(VALID_TURNS).replace('{"group": 0,', '{"group": 0, "group": 1,', 1),
     ["{in}:1", "duplicate key 'group'"]),
    ("nan_reward", _turns(edit={0: {"reward": float("nan")}}), ["{in}:1", "reward"]),
    ("float_prompt", _turns(edit={0: {"prompt_tokens": 100.5}}), ["{in}:1", "prompt_tokens"]),
    ("float_whole_prompt", _turns(edit={0: {"prompt_tokens": 100.0}}), ["{in}:1", "prompt_tokens"]),
    ("huge_prompt", _turns(edit={0: {"prompt_tokens": 10**30}}), ["{in}:1", "prompt_tokens"]),
    ("prompt_2_50", _turns(edit={0: {"prompt_tokens": 2**50}}), ["{in}:1", "prompt_tokens"]),
    ("duplicate_turn", _turns(extra=[dict(VALID_TURNS[1])]), ["{in}:5", "duplicate turn"]),
    ("bool_group", _turns(edit={0: {"group": True}}), ["{in}:1", "group"]),
    ("missing_completion", _turns(edit={2: {"completion_tokens": None}}), ["{in}:3", "completion_tokens"]),
    ("late_first_turn", jsonl([{**r, "turn": r["turn"] + 3} for r in VALID_TURNS]), ["{in}", "turn"]),
    ("bad_byte", jsonl(VALID_TURNS).encode() + b"\xc3\x28\n", ["{in}:5", "UTF-8"]),
    ("empty", "\n\n", ["no call records"]),
]


PSRL_OK = ('{"trainer/global_step": 1, "timing_s/step": 30.0, "timing_s/update_actor": 5.0, '
           '"psrl/trained_tokens": 1000}\n')

PSRL = [
    ("nan_step_time", PSRL_OK + PSRL_OK.replace("30.0", "NaN").replace(": 1,", ": 2,", 1),
     ["{in}:2", "timing_s/step"]),
    ("console_inf", "step:1 - timing_s/step:inf - timing_s/update_actor:5 - psrl/trained_tokens:10\n",
     ["{in}:1", "timing_s/step"]),
    ("console_overflow", "step:1 - timing_s/step:3 - timing_s/update_actor:1 - psrl/trained_tokens:1e400\n",
     ["{in}:1", "psrl/trained_tokens"]),
    ("float_step", PSRL_OK.replace('"trainer/global_step": 1', '"trainer/global_step": 1.5'),
     ["{in}:1", "trainer/global_step"]),
    ("dup_key", PSRL_OK.replace("{", '{"timing_s/step": 1, ', 1), ["{in}:1", "duplicate key"]),
    ("missing_train", PSRL_OK.replace('"timing_s/update_actor": 5.0, ', ""), ["{in}:1", "timing_s/update_actor"]),
    ("no_metrics", "just a log line\nanother one\n", ["{in}", "no metric lines"]),
    ("binary", BINARY, ["{in}:1", "binary file"]),
]


def _obs_file(tmp):
    p = tmp / "obs.jsonl"
    p.write_text(jsonl([VALID_OBSERVATION, {**VALID_OBSERVATION, "value": 13.0}]))
    return str(p)


# (name, cli name, argv, expected); "{tmp}" is the test's temporary directory, "{obs}" a valid
# two-record observation file written there first.
OPTIONS = [
    ("kfold_exceeds", "srl-regress", ["fit", "--family", "composed", "--obs", "{obs}", "-o", "{tmp}/a.json",
                                      "--kfold", "50"], ["--kfold 50", "2 observations"]),
    ("kfold_one", "srl-regress", ["fit", "--family", "composed", "--obs", "{obs}", "-o", "{tmp}/a.json",
                                  "--kfold", "1"], ["--kfold 1"]),
    ("kfold_negative", "srl-regress", ["fit", "--family", "composed", "--obs", "{obs}", "-o", "{tmp}/a.json",
                                       "--kfold", "-1"], ["--kfold"]),
    ("fit_output_dir", "srl-regress", ["fit", "--family", "composed", "--obs", "{obs}", "-o", "{tmp}"],
     ["-o", "directory"]),
    ("fit_output_under_file", "srl-regress", ["fit", "--family", "composed", "--obs", "{obs}", "-o",
                                              "{obs}/a.json"], ["-o/--output", "not a directory"]),
    ("tp_huge", "srl-regress", ["fit", "--family", "composed", "--obs", "{obs}", "-o", "{tmp}/a.json",
                                "--tp", "99999999999999999999"], ["--tp"]),
    ("groups_zero", "srl-workload", ["synth", "rl_math", "--groups", "0", "-o", "{tmp}/t.jsonl"], ["--groups"]),
    ("groups_huge", "srl-workload", ["synth", "rl_math", "--groups", "99999999999999999999", "-o",
                                     "{tmp}/t.jsonl"], ["--groups"]),
    ("knob_twice", "srl-workload", ["synth", "multi_turn", "calls=2", "calls=3", "-o", "{tmp}/t.jsonl"],
     ["calls", "twice"]),
    ("knob_typo", "srl-workload", ["synth", "multi_turn", "calss=2", "-o", "{tmp}/t.jsonl"],
     ["did you mean 'calls'"]),
    ("knob_float", "srl-workload", ["synth", "multi_turn", "calls=2.5", "-o", "{tmp}/t.jsonl"], ["calls"]),
    ("synth_output_dir", "srl-workload", ["synth", "rl_math", "-o", "{tmp}"], ["-o", "directory"]),
    ("synth_impossible", "srl-workload", ["synth", "rl_math", "--groups", "1000000", "max_model_len=10", "-o",
                                          "{tmp}/t.jsonl"], ["max_model_len"]),
    ("srl_output_file", "srl", ["-o", "{obs}", "run.training_steps=1"], ["-o", "{obs}"]),
    ("srl_output_under_file", "srl", ["run.output_dir={obs}/runs"], ["run.output_dir", "not a directory"]),
    ("srl_missing_config", "srl", ["--config", "{tmp}/nope.yaml"], ["nope.yaml", "cannot read"]),
    ("srl_config_dir", "srl", ["config", "--config", "{tmp}"], ["--config"]),
    ("presets_typo", "srl", ["presets", "show", "bounded_asyn"], ["did you mean 'bounded_async'"]),
    ("compare_missing", "srl-compare", ["{tmp}/a.jsonl", "{tmp}/b.jsonl"], ["a.jsonl"]),
    ("psrl_output_file", "srl-psrl-plot", ["{obs}", "-o", "{obs}"], ["-o"]),
    ("unknown_option", "srl-workload", ["validate", "--frobnicate", "{obs}"], ["--frobnicate"]),
    ("step_bad_config", "srl", ["step", "deployment.rollout.instances=1.5", "--do", "q"],
     ["deployment.rollout.instances"]),
]


def _snap(edit):
    """A malformed snapshot made from the valid one by ``edit(document)`` (in place)."""
    def make():
        d = valid_snapshot()
        edit(d)
        return json.dumps(d)
    return make


def _req0(d) -> dict:
    return next(i for i in d["instances"] if i["running"])["running"][0]


def _dup_request(d):
    inst = next(i for i in d["instances"] if i["running"])
    inst["running"].append(copy.deepcopy(inst["running"][0]))


def _snap_text(edit):
    return lambda: edit(json.dumps(valid_snapshot()))


# `srl-predict SNAPSHOT`: the strict JSON layer (bytes, duplicate keys, NaN, depth), 64-bit
# integers, and the consistency the restore relies on (each a traceback or a silent wrong
# prediction before).
SNAPSHOT = [
    ("latin1", _snap_text(lambda t: t.encode().replace(b'"schema"', b'"sch\xe9ma"', 1)), ["{in}", "line 1", "UTF-8"]),
    ("binary", BINARY, ["{in}", "line 1", "binary file"]),
    ("deep_nesting", "[" * 100000 + "]" * 100000, ["{in}", "nested too deeply"]),
    ("dup_key", _snap_text(lambda t: t.replace('{"schema"', '{"time_s": 1.0, "schema"', 1)),
     ["{in}", "duplicate key 'time_s'"]),
    ("nan_time", _snap_text(lambda t: re.sub(r'"time_s": [0-9.e+-]+', '"time_s": NaN', t, count=1)),
     ["{in}", "time_s", "finite"]),
    ("huge_rid", _snap(lambda d: _req0(d).update(rid=2**70)), ["{in}", "rid", "64"]),
    ("dup_rid", _snap(_dup_request), ["{in}", "request rid", "appears twice"]),
    ("unknown_traj", _snap(lambda d: _req0(d).update(tid=10**6)), ["{in}", "its trajectory 1000000"]),
    ("next_rid_low", _snap(lambda d: d["pipeline"].update(next_rid=0)), ["{in}", "pipeline.next_rid"]),
    ("dup_gid", _snap(lambda d: d["running_groups"].append(copy.deepcopy(d["running_groups"][0]))),
     ["{in}", "gid", "appears twice"]),
    ("empty_group", _snap(lambda d: d["buffer"][0].update(trajs=[])), ["{in}", "buffer[0].trajs", "at least one"]),
    ("traj_ids_gap", _snap(lambda d: d["running_groups"][0]["trajs"][-1].update(tid=99999)),
     ["{in}", "running_groups[0].trajs", "consecutive"]),
    ("calls_done", _snap(lambda d: d["running_groups"][0]["trajs"][0].update(calls_done=99)),
     ["{in}", "calls_done", "calls_total"]),
    ("kv_over_capacity", _snap(lambda d: d["instances"][0].update(kv_used_tokens=10**12)),
     ["{in}", "instances[0].kv_used_tokens", "kv_capacity_tokens"]),
    ("instances_vs_config", _snap(lambda d: d.update(instances=d["instances"][:1])),
     ["{in}", "instances", "deployment.rollout.instances"]),
    ("steps_total_vs_config", _snap(lambda d: d["trainer"].update(steps_total=7)),
     ["{in}", "trainer.steps_total", "run.training_steps"]),
    ("steps_done_over", _snap(lambda d: d["trainer"].update(steps_done=3)), ["{in}", "trainer.steps_done"]),
    ("arrival_future", _snap(lambda d: _req0(d).update(arrival_s=1e9)), ["{in}", "arrival_s", "after"]),
    ("time_negative", _snap(lambda d: d.update(time_s=-5.0)), ["{in}", "time_s", ">= 0"]),
    ("policy_state_list", _snap(lambda d: d["pipeline"].update(policy_state=[1, 2])),
     ["{in}", "pipeline.policy_state", "object"]),
    ("policy_state_bad_float", _snap(lambda d: d["pipeline"]["policy_state"].update(
        consumed={"__float__": "abc"})), ["{in}", "pipeline.policy_state"]),
    ("config_typo", _snap(lambda d: d["config"]["deployment"].update(modle="x")),
     ["{in}", "config", "deployment.modle"]),
]


# `srl-regress show ARTIFACT` (every artifact reader: `simrl.cost.artifact.read_artifact`).
ARTIFACT = [
    ("latin1", lambda: valid_artifact_text().encode().replace(b'"family"', b'"fam\xefily"', 1),
     ["{in}:", "UTF-8"]),
    ("binary", BINARY, ["{in}:1", "binary file"]),
    ("dup_key", lambda: valid_artifact_text().replace("{", '{"family": "linear",', 1),
     ["{in}", "duplicate key 'family'"]),
    ("deep_nesting", "[" * 100000 + "]" * 100000, ["{in}", "nested too deeply"]),
    ("nan_coef", lambda: valid_artifact_text().replace('"coefficients": {', '"coefficients": {"zz": NaN,', 1),
     ["{in}", "coefficients.zz"]),
    ("empty", "", ["{in}", "not valid JSON"]),
]


def _study(**over) -> str:
    return yaml.safe_dump({**copy.deepcopy(VALID_STUDY), **over}, sort_keys=False)


# `srl-research QUESTION.yaml`: refused while the study is read, before any run.
RESEARCH = [
    ("latin1", _study().encode() + "# caf\xe9\n".encode("latin-1"), ["{in}:", "UTF-8"]),
    ("nul_byte", _study() + "x: 1\x00\n", ["{in}:", "NUL"]),
    ("binary", BINARY, ["{in}:1"]),
    ("duplicate_key", _study() + "name: again\n", ["{in}", "repeated"]),
    ("seeds_string", _study(seeds="abc"), ["{in}", "seeds"]),
    ("values_nan", _study(variation={"name": "length_dispersion", "values": [float("nan")]}),
     ["{in}", "variation.values"]),
    ("objective_typo", _study(objective="trained_tokens"), ["{in}", "objective"]),
    ("unknown_key", _study(questoin="x"), ["{in}", "questoin", "unknown key"]),
    ("baseline_list", _study(baseline=[1]), ["{in}", "baseline"]),
    ("empty", "", ["{in}", "top level"]),
]


# `srl-research --lessons FILE`: (name, lessons file content, expected), read before any run.
LESSONS = [
    ("latin1", b'{"id": "a\xff"}\n', ["{lessons}:1", "UTF-8"]),
    ("dup_key", '{"id": "a", "id": "b"}\n', ["{lessons}:1", "duplicate key 'id'"]),
    ("nan", '{"id": "a", "x": NaN}\n', ["{lessons}:1", "NaN"]),
    ("list_line", "[1]\n", ["{lessons}:1", "not a lesson"]),
    ("missing_fields", '{"id": "a", "candidate": {"name": "kv_cache_aware"}}\n', ["{lessons}:1", "not a lesson"]),
    ("candidate_string", json.dumps({"id": "a", "family": "router", "candidate": "x", "baseline": {},
                                     "evidence": {}, "conditions": {}, "question": "q", "claim": "c"}) + "\n",
     ["{lessons}:1", "candidate"]),
]


def counts() -> dict[str, int]:
    return {"config": len(CONFIG), "overrides": len(OVERRIDES), "trace": len(TRACE), "splitwise": len(SPLITWISE),
            "observations": len(OBSERVATIONS), "realrun": len(REALRUN), "collect": len(COLLECT),
            "psrl": len(PSRL), "options": len(OPTIONS), "sweep": len(SWEEP), "snapshot": len(SNAPSHOT),
            "artifact": len(ARTIFACT), "research": len(RESEARCH), "lessons": len(LESSONS)}
