"""Lowering and the declared feature set: what is accepted, what is rejected and how it is named.

Needs no jax: the lowering is numpy-only, so a core install can still check configurations.
"""

import re
import subprocess
import sys

import attrs
import pytest
from simhelpers import linear_costs, multi_turn_workload, random_workload

from simrl.config import load_config
from simrl.cost.linear import LinearRollout
from simrl.policy.params import LoweringContext
from simrl.policy.record import ParamsPolicy
from simrl_fast.lowering import (
    RULE_ABORT_RESTART,
    RULE_ABORT_RESUME,
    RULE_DRAIN,
    RULE_KEEP_PAUSE,
    FastPathUnsupported,
    lower,
    lower_policy,
)

OK = ["deployment.rollout.max_num_batched_tokens=0", "deployment.rollout.prefix_caching=false",
      "deployment.rollout.kv_policy=reserve", "policy=bounded_async", "policy.batch_groups=4",
      "policy.inflight_rule=keep_pause", "router.active_cap=0"]


def lowered(*extra, workload=None, costs=None):
    cfg = load_config(overrides=[*OK, *extra])
    return lower(cfg, workload or random_workload(groups=8, n=4), costs or linear_costs())


def test_supported_configuration_lowers_to_numbers():
    static, p, wa = lowered("deployment.rollout.instances=3", "policy.max_staleness=2")
    assert static.instances == 3 and static.group_size == 4 and static.groups == 8
    assert float(p.budget_base) == 12 and float(p.budget_per_version) == 4 and int(p.batch) == 4
    assert int(p.evict_stale) == 1 and int(p.drop_stale) == 1 and int(p.stale_bound) == 2
    assert wa.prompt.shape == (8, 4)


def test_both_kv_policies_lower():
    assert int(lowered()[1].od) == 0
    assert int(lowered("deployment.rollout.kv_policy=on_demand")[1].od) == 1


def test_chunked_prefill_lowers_its_token_budget():
    """max_num_batched_tokens is a Params number; a batch with a budget traces the chunked code
    (Static.chunked_prefill), one without does not."""
    static, p, _ = lowered("deployment.rollout.kv_policy=on_demand", "deployment.rollout.max_num_batched_tokens=8192")
    assert int(p.token_budget) == 8192 and static.chunked_prefill
    static, p, _ = lowered()
    assert int(p.token_budget) == 0 and not static.chunked_prefill


@pytest.mark.parametrize("override, feature", [
    ("router.name=kv_cache_aware", "router.name=kv_cache_aware"),
    ("router.name=throughput_balance", "router.name=throughput_balance"),
    ("run.time_horizon_s=100", "time_horizon_s"),
    ("policy=prime_rl", "policy 'prime_rl'"),
    ("policy=art", "admit_max_batches_ahead=0"),
    ("cost.training_knobs.optimizer_cpu_offload=true", "optimizer_cpu_offload=true (trainer offload"),
])
def test_unsupported_features_are_rejected_by_name(override, feature):
    extra = ["policy.max_steps_off_policy=0"] if override == "policy=art" else []
    with pytest.raises(FastPathUnsupported, match="simrl_fast does not support") as exc:
        lowered(override, *extra)
    assert feature in str(exc.value) and "SimPy" in str(exc.value)


def test_unsupported_workloads_and_costs_are_rejected_by_name():
    with pytest.raises(FastPathUnsupported, match="multi-call trajectories"):
        lowered(workload=multi_turn_workload())
    from simrl.cost.analytical import AnalyticalTraining  # noqa: F401  (a non-constant training model)

    class Costs:
        rollout = type("Roof", (), {"kv_capacity_tokens": lambda self: 10**6})()
        training = linear_costs().training
        weight_sync = linear_costs().weight_sync

    with pytest.raises(FastPathUnsupported, match="rollout cost model Roof"):
        lowered(costs=Costs())
    with pytest.raises(FastPathUnsupported, match="larger than the KV capacity"):
        lowered("deployment.rollout.kv_capacity_tokens=100")
    c = linear_costs()
    c.rollout = LinearRollout(a=0.0, b=0.0)
    with pytest.raises(FastPathUnsupported, match="a \\+ b = 0"):
        lowered(costs=c)


def test_builtin_policies_lower_exactly():
    ctx = LoweringContext(group_size=4, instances=2)
    sync = load_config(overrides=["policy=sync", "policy.batch_groups=8"]).policy.lower(ctx)
    assert sync.fast_path_exact == 1 and sync.admit_block_while_training == 1
    assert sync.admit_budget_base_groups == sync.admit_budget_per_version_groups == 8
    ba = load_config(overrides=["policy=bounded_async", "policy.batch_groups=8", "policy.max_staleness=2",
                                "policy.max_concurrent_groups=5"]).policy.lower(ctx)
    assert ba.admit_concurrency_groups == 5 and ba.admit_budget_base_groups == 24 and ba.evict_stale_on_publish == 1


def test_core_and_lowering_never_import_jax():
    code = ("import sys, simrl, simrl.engine.sim, simrl_fast, simrl_fast.lowering, simrl_explore.cli_sweep; "
            "assert 'jax' not in sys.modules, 'jax imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_group_dropped_is_diagnosed_at_lowering():
    from simrl_fast import FastPathNoProgress

    ov = [*OK[:3], "policy=areal", "policy.consumer_batch_size=2", "policy.should_accept_fn=nonzero_std"]
    with pytest.raises(FastPathNoProgress, match="zero variance.*dispatch groups forever"):
        lower(load_config(overrides=ov), random_workload(groups=8, n=4, zero_variance=1.0), linear_costs())
    lower(load_config(overrides=ov), random_workload(groups=8, n=4, zero_variance=0.5), linear_costs())


#: every preset at its defaults: accepted by the policy check, or the feature it is rejected for
DEFAULTS = {
    "sync": None, "bounded_async": None, "areal": None, "skyrl": None, "verl": None, "openrlhf": None,
    "nemo_rl": None, "roll": None,
    "trl": None, "slime": None, "verl_v1": None,
    "art": None, "dressage": None, "prime_rl": "fast_path_exact=0",
    "psrl": None,
}


@pytest.mark.parametrize("kind", sorted(DEFAULTS))
def test_each_preset_at_its_defaults_passes_the_policy_check_or_is_rejected_by_name(kind):
    from simrl.policy.registry import policy_kinds

    assert set(DEFAULTS) == {k for k in policy_kinds() if not k.startswith("_")}
    policy = load_config(overrides=[f"policy={kind}"]).policy
    ctx = LoweringContext(group_size=4, instances=2)
    if DEFAULTS[kind] is None:
        assert lower_policy(policy, ctx).fast_path_exact == 1
    else:
        with pytest.raises(FastPathUnsupported, match=DEFAULTS[kind]):
            lower_policy(policy, ctx)


def _verl_record():
    return load_config(overrides=["policy=verl"]).policy.lower(LoweringContext(group_size=4, instances=2))


def test_a_bounded_queue_is_accepted_only_where_admission_keeps_it_from_overflowing():
    ctx = LoweringContext(group_size=4, instances=2)
    rec = _verl_record()  # staleness_samples < M = int(8 * 1.1 * 4) = 35, MessageQueue of 35
    assert (rec.admit_budget_base_groups, rec.buffer_capacity_groups, rec.admit_count_since_publish) == (35, 35, 1)
    lower_policy(ParamsPolicy(rec), ctx)
    with pytest.raises(FastPathUnsupported, match="bounded buffer"):  # a budget past the capacity
        lower_policy(ParamsPolicy(attrs.evolve(rec, admit_budget_base_groups=36.0)), ctx)
    with pytest.raises(FastPathUnsupported, match="bounded buffer"):  # a count that does not see every group
        lower_policy(ParamsPolicy(attrs.evolve(rec, admit_count_dispatched=0, admit_count_since_publish=0)), ctx)


@pytest.mark.parametrize("change, feature", [
    ({"batch_order": 2}, None),  # accepted: oldest-dispatch-first batches (simrl_fast.trainer.trainer_react)
    ({"batch_order": 2, "batch_min_groups": 2, "batch_max_groups": 6}, None),  # of min..max groups
    ({"batch_shrink_by_drops": 1, "batch_min_groups": 4, "batch_max_groups": 4}, "batches shrunk by drops"),
    ({"max_dispatch_age": 1}, None),  # accepted: drops by dispatch age (simrl_fast.trainer.age_cut)
    ({"admit_return_evicted": 1, "admit_count_dispatched": 0, "admit_count_since_publish": 0,
      "buffer_capacity_groups": -1}, None),  # accepted: evicted groups return their admission slots
    ({"batch_order": 1, "batch_min_groups": 4, "batch_max_groups": 4, "buffer_capacity_groups": -1,
      "evict_stale_on_publish": 0, "max_dispatch_age": 1}, "dispatch-window batches (batch_order=1) with a rule"),
    ({"batch_order": 1, "drop_zero_variance": 1}, "dispatch-window batches (batch_order=1) with a rule that drops"),
    ({"admit_max_batches_ahead": 0}, "admit_max_batches_ahead=0"),
    ({"admit_queue_blocks_groups": 31.0, "batch_min_groups": 32, "batch_max_groups": 32}, "admit_queue_blocks_groups < "),
    ({"fail_on_version_crossing": 2, "admit_count_since_publish": 0, "drop_zero_variance": 1,
      "collapse_zero_variance_groups": 3}, "the collapse failsafe with re-dispatched groups"),
    ({"fail_on_version_crossing": 2, "admit_count_since_publish": 0}, None),  # accepted (simrl_fast.crossing)
    ({"batch_order": 1, "batch_min_groups": 4, "batch_max_groups": 4, "buffer_capacity_groups": -1,
      "evict_stale_on_publish": 0}, None),  # control: a dispatch window is accepted
    ({"batch_min_groups": 4, "batch_max_groups": 40, "admit_max_batches_ahead": 1,
      "admit_queue_blocks_groups": 4.0, "route_needs_dispatch_version": 1}, None),  # ART's shape is accepted
])
def test_record_extensions_the_kernel_lacks_are_rejected_by_name(change, feature):
    rec = attrs.evolve(_verl_record(), **change)
    if feature is None:
        assert lower_policy(ParamsPolicy(rec), LoweringContext(group_size=4, instances=2)) == rec
        return
    with pytest.raises(FastPathUnsupported, match=re.escape(feature)):
        lower_policy(ParamsPolicy(rec), LoweringContext(group_size=4, instances=2))


def test_colocated_placement_lowers_its_phase_times_and_the_colocated_rule():
    # Costs built in code (no ColocatedCost): offload_before_s = offload_s / 2 = 1.5, offload_after_s
    # = offload_s / 2 + publish_time = 1.5 + 1.0 = 2.5 (simrl.cost.build.Costs)
    costs = attrs.evolve(linear_costs(sync_s=1.0), offload_s=3.0)
    _, p, _ = lowered("deployment.placement=colocated", "policy.inflight_rule=drain", costs=costs)
    assert int(p.colocated) == 1 and float(p.off_before) == 1.5 and float(p.off_after) == 2.5
    assert float(p.offload_s) == 3.0 and float(p.sync_s) == 1.0
    assert int(p.rule) == RULE_KEEP_PAUSE  # Weights.colocated_rule: drain pauses as keep_pause
    for rule, want in (("continue", RULE_KEEP_PAUSE), ("swap_in_place", RULE_KEEP_PAUSE),
                       ("abort_resume", RULE_ABORT_RESUME), ("abort_restart", RULE_ABORT_RESTART)):
        _, p, _ = lowered("deployment.placement=colocated", f"policy.inflight_rule={rule}", costs=costs)
        assert int(p.rule) == want, rule
    _, p, _ = lowered("policy.inflight_rule=drain", costs=costs)  # disaggregated: untouched
    assert int(p.colocated) == 0 and int(p.rule) == RULE_DRAIN and float(p.off_after) == 0.0


def test_colocated_phase_times_are_the_cost_models_own():
    # built costs: the phases of simrl.cost.colocated (refit knobs included), taken bit for bit
    from simrl.cost.build import build_costs

    ov = ["deployment.placement=colocated", "cost.colocated_knobs.refit=megatron",
          "cost.colocated_knobs.refit_transport=ipc", "cost.colocated_knobs.sleep_level=2"]
    cfg = load_config(overrides=[*OK, *ov])
    costs = build_costs(cfg)
    _, p, _ = lower(cfg, random_workload(groups=8, n=4), costs)
    assert float(p.off_before) == costs.colocated.before_s() > 0
    assert float(p.off_after) == costs.colocated.after_s() > 0
    assert float(p.offload_s) == costs.offload_s


def test_colocated_param_offload_calls_reach_the_fast_path():
    # verl's per-call parameter round trips (cost.colocated_knobs.param_offload_calls) are phase
    # seconds of simrl.cost.colocated: the fast path takes them as they are, nothing to reject
    from simrl.cost.build import build_costs

    ov = ["deployment.placement=colocated", "deployment.training.zero_stage=3"]
    one = build_costs(load_config(overrides=[*OK, *ov]))
    cfg = load_config(overrides=[*OK, *ov, "cost.colocated_knobs.param_offload_calls=3"])
    three = build_costs(cfg)
    _, p, _ = lower(cfg, random_workload(groups=8, n=4), three)
    assert float(p.off_before) == three.colocated.before_s()
    assert float(p.off_after) == three.colocated.after_s()
    # two more loads (before) and two more offloads (after) of the parameter shard
    shard = one.colocated.phases()["load_params"]
    assert three.colocated.before_s() - one.colocated.before_s() == pytest.approx(2 * shard)
    assert three.colocated.after_s() - one.colocated.after_s() == pytest.approx(2 * shard)
    assert shard > 0


@pytest.mark.parametrize("extra, feature", [
    (["deployment.training.trigger_parameter_sync_step=2"], "trigger_parameter_sync_step=2 (streaming trainer)"),
    (["cost.training_knobs.optimizer_cpu_offload=true"], "(trainer offload phases)"),
    (["policy=psrl"], "placement=colocated with per-instance weight sync"),
])
def test_what_colocated_placement_does_not_cover_is_rejected_by_name(extra, feature):
    with pytest.raises(FastPathUnsupported, match=re.escape(feature)):
        lowered("deployment.placement=colocated", *extra)


#: presets whose policy lowers exactly and whose placement is disaggregated at their defaults
DISAGGREGATED_EXACT = ("areal", "nemo_rl", "openrlhf", "psrl", "roll", "skyrl", "verl")


@pytest.mark.parametrize("kind", DISAGGREGATED_EXACT)
def test_presets_lower_at_their_full_defaults(kind):
    """These seven lower at their full defaults: the prefix cache over the workload's shared prompts, chunked
    prefill (8192), on_demand KV and the roofline rollout cost; with prefix caching off the cache is not traced."""
    from simrl.cost.build import build_costs
    from simrl.engine.sim import load_workload

    cfg = load_config(overrides=[f"policy={kind}"])
    wl, costs = load_workload(cfg), build_costs(cfg)
    assert cfg.deployment.rollout.kv_policy == "on_demand" and cfg.deployment.rollout.prefix_caching
    static, p, _ = lower(cfg, wl, costs)
    assert int(p.od) == 1 and int(p.ro_kind) == 1 and int(p.token_budget) == 8192
    assert int(p.pc) == 1 and static.prefix
    cfg = load_config(overrides=[f"policy={kind}", "deployment.rollout.prefix_caching=false"])
    static, p, _ = lower(cfg, wl, costs)
    assert int(p.pc) == 0 and not static.prefix


def test_inprocess_engine_core_reaches_the_fast_path_as_a_roofline_number():
    # cost.rollout_knobs.engine_core=inprocess is a cost (simrl.cost.roofline): its 20 us per sequence
    # per iteration folds into the roofline record's per-sequence term, which the fast path lowers as is
    from simrl.cost.build import build_costs
    from simrl.cost.formulas import RooflineParams

    i = RooflineParams._fields.index("overhead_per_seq_s")
    base = ["deployment.model=llama-3.1-8b", "deployment.rollout.gpu=H100", "deployment.training.gpu=H100"]
    per_seq = []
    for extra in ([], ["cost.rollout_knobs.engine_core=inprocess"]):
        cfg = load_config(overrides=[*OK, *base, *extra])
        _, p, _ = lower(cfg, random_workload(groups=8, n=4), build_costs(cfg))
        per_seq.append(float(p.ro[i]))
    assert per_seq[0] == pytest.approx(30e-6)  # overhead_per_seq_s (calibrated, simrl.cost.roofline)
    assert per_seq[1] == pytest.approx(30e-6 + 20e-6)


@pytest.mark.parametrize("policy, knob", [("nemo_rl", "num_generations_per_prompt"), ("openrlhf", "n_samples_per_prompt"),
                                         ("trl", "num_generations")])
def test_a_policy_the_engine_stops_is_refused_by_name(policy, knob):
    """A policy whose ``check_group_size`` (the engine's check at every dispatch) or ``lower`` raises the engine's
    `PolicyError` (its group size other than the workload's) is a named refusal, not a crash or a run SimPy would
    stop: `srl-sweep --engine auto` falls back to SimPy, which records the failure (found by tests/fast/outsider.py,
    seeds 46 and 235: lowering raised PolicyError; seed 639: trl's check was only at SimPy's dispatch, so the fast
    path ran what SimPy stopped)."""
    cfg = load_config(overrides=[*OK, f"policy={policy}", f"policy.{knob}=2"])
    with pytest.raises(FastPathUnsupported, match=rf"policy '{policy}' as configured .*{knob}=2 but the workload's "
                                                  "groups hold 4 samples"):
        lower(cfg, random_workload(groups=8, n=4), linear_costs())
