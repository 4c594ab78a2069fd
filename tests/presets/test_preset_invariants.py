"""Invariants every registered preset keeps on random small workloads and deployments.

(Named ``test_preset_invariants`` because ``tests/engine/test_invariants.py`` already owns the
basename and the test directories are not packages.)

For each policy kind: the run ends (finished, or stopped with a diagnosis; never a hang);
trajectories are conserved; the promised staleness bound holds where it is enforced and
violations are counted where it is only counted; versions never go backwards; the policy
survives a YAML round trip. A second test runs the asynchronous modes of the presets whose
defaults are synchronous.
"""

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simhelpers import check_invariants, linear_costs, random_workload, run_sim

from simrl.config import load_config, structure, to_yaml
from simrl.policy.params import LoweringContext
from simrl.policy.registry import policy_kinds

KINDS = policy_kinds()

#: non-default modes worth exercising (the defaults of several presets are synchronous)
VARIANTS = [
    ["policy=psrl", "policy.staleness=2"],
    ["policy=psrl", "policy.staleness=1", "policy.redundant_rollout_enable=true"],
    ["policy=psrl", "policy.staleness=1", "policy.sync_strategy=status_based", "policy.sync_threshold=3"],
    ["policy=psrl", "policy.staleness=1", "policy.partial_rollout_enable=false", "policy.dynamic_sampling_filter=true"],
    ["policy=areal", "policy.max_head_offpolicyness=2", "policy.should_accept_fn=nonzero_std"],
    ["policy=areal", "policy.max_head_offpolicyness=1", "policy.dynamic_bs=true", "policy.should_accept_fn=nonzero_std"],
    ["policy=roll", "policy.async_generation_ratio=1"],
    ["policy=roll", "policy.async_generation_ratio=1.5", "policy.is_use_additional_prompts=true"],
    ["policy=roll", "policy.async_generation_ratio=2", "policy.query_filter_type=std_filter", "policy.std_threshold=0"],
    ["policy=slime", "policy.mode=train_async", "policy.over_sampling_batch_size=40"],
    ["policy=slime", "policy.mode=fully_async", "policy.sglang_server_concurrency=24"],
    ["policy=slime", "policy.partial_rollout=true", "policy.dynamic_sampling_filter_path=check_reward_nonzero_std"],
    ["policy=verl", "policy.mode=one_step_off"],
    ["policy=verl", "policy.partial_rollout=false", "policy.staleness_threshold=1.0"],
    ["policy=verl_v1", "policy.trainer_mode=separate_async", "policy.max_off_policy_threshold=1"],
    ["policy=verl_v1", "policy.trainer_mode=colocate_async", "policy.filter_groups_metric=acc"],
    ["policy=verl_v1", "policy.trainer_mode=separate_async", "policy.max_off_policy_strategy=wait",
     "policy.max_off_policy_threshold=2"],
    ["policy=skyrl", "policy.max_staleness_steps=1", "policy.num_parallel_generation_workers=64"],
    ["policy=skyrl", "policy.sample_full_batch=true", "policy.zero_variance_filter=true"],
]


def check_round_trip(cfg):
    assert structure(yaml.safe_load(to_yaml(cfg))) == cfg


scenario = st.fixed_dictionaries({
    "instances": st.integers(1, 3),
    "kv_policy": st.sampled_from(["reserve", "on_demand"]),
    "kv_tokens": st.sampled_from([6_000, 40_000, 1_000_000]),
    "step_s": st.sampled_from([0.5, 5.0, 40.0]),
    "sync_s": st.sampled_from([0.1, 3.0]),
    "router": st.sampled_from(["round_robin", "least_requests", "throughput_balance", "kv_cache_aware"]),
    "zero_variance": st.sampled_from([0.0, 0.3]),
    "completion": st.sampled_from([(20, 300), (20, 1500), (200, 3000)]),
    "seed": st.integers(0, 10_000),
})


def run_scenario(policy_overrides, sc):
    ov = [*policy_overrides, f"deployment.rollout.instances={sc['instances']}",
          f"deployment.rollout.kv_policy={sc['kv_policy']}", f"router.name={sc['router']}",
          "run.training_steps=3", "run.telemetry=false", "run.time_horizon_s=200000"]
    wl = random_workload(groups=16, n=3, seed=sc["seed"], prompt=(50, 600), completion=sc["completion"],
                         zero_variance=sc["zero_variance"])
    costs = linear_costs(kv_tokens=sc["kv_tokens"], step_s=sc["step_s"], sync_s=sc["sync_s"])
    report, sim = run_sim(ov, wl, costs)
    # Finished, or stopped with a diagnosis that says why (never a hang).
    assert report.diagnosis is None or "training steps" in report.diagnosis
    if report.diagnosis is None:
        assert len(report.steps) == 3
    check_invariants(report, sim)
    check_round_trip(sim.cfg)
    return report


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario)
def test_preset_invariants(kind, sc):
    run_scenario([f"policy={kind}"], sc)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(x.split("=")[-1] for x in v))
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario)
def test_preset_variant_invariants(variant, sc):
    run_scenario(variant, sc)


@pytest.mark.parametrize("kind", KINDS)
def test_default_policy_round_trips_and_lowers(kind):
    cfg = load_config(overrides=[f"policy={kind}"])
    check_round_trip(cfg)
    params = cfg.policy.lower(LoweringContext(group_size=8, instances=2))
    assert all(isinstance(x, float) and not math.isnan(x) for x in params.as_dict().values())
    assert params.fast_path_exact in (0, 1)
