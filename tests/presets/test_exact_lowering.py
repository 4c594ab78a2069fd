"""Every policy whose lowering claims to be exact simulates identically to its lowered record.

For each registered kind and a few of its modes, on generated scenarios: lower the policy with
the run's `LoweringContext`; where the record says ``fast_path_exact = 1``, simulate the preset
and `ParamsPolicy(record)` on the same workload and costs, and require the same report (steps,
calls, totals, instances) and the same telemetry. SimPy only: the JAX engine is held against
the same records by tests/fast.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simhelpers import linear_costs, random_workload

from simrl.config import load_config
from simrl.engine.sim import SimulationError, build_simulation, summarise
from simrl.policy.params import LoweringContext
from simrl.policy.record import ParamsPolicy
from simrl.policy.registry import policy_kinds

#: modes whose lowering is exact (the defaults of every kind are tried as well)
MODES = [
    ["policy=areal", "policy.max_head_offpolicyness=2", "policy.consumer_batch_size=4"],
    ["policy=areal", "policy.max_head_offpolicyness=1", "policy.should_accept_fn=nonzero_std",
     "policy.consumer_batch_size=4", "policy.max_concurrent_rollouts=6"],
    ["policy=skyrl", "policy.max_staleness_steps=1", "policy.policy_mini_batch_size=4",
     "policy.num_parallel_generation_workers=6"],
    ["policy=skyrl", "policy.max_staleness_steps=2", "policy.policy_mini_batch_size=3",
     "policy.zero_variance_filter=true", "policy.sample_full_batch=true",
     "policy.num_parallel_generation_workers=5"],
    ["policy=trl", "policy.mode=sync", "policy.per_device_train_batch_size=2", "policy.num_processes=4"],
    ["policy=sync", "policy.batch_groups=4"],
    ["policy=bounded_async", "policy.batch_groups=4", "policy.max_staleness=1",
     "policy.inflight_rule=abort_restart"],
    # record extensions: a count restarted at each publication and an output-queue cap (verl
    # fully_async), a budget per batch taken (verl one_step_off, openrlhf), dispatch-window and
    # oldest-dispatch-first batches (nemo_rl, verl_v1), dispatch-age drops (verl_v1, trl async),
    # a buffer cap in samples (trl async), batches shrunk by drops (areal dynamic_bs)
    ["policy=verl", "policy.ppo_mini_batch_size=2", "policy.trigger_parameter_sync_step=2",
     "policy.staleness_threshold=0.5", "policy.concurrent_samples_per_replica=2"],
    ["policy=verl", "policy.ppo_mini_batch_size=3", "policy.partial_rollout=false"],
    ["policy=verl", "policy.mode=one_step_off", "policy.train_batch_size=5"],
    ["policy=openrlhf", "policy.rollout_batch_size=5", "policy.partial_rollout_enable=true"],
    ["policy=nemo_rl", "policy.num_prompts_per_step=4", "policy.max_trajectory_age_steps=2",
     "policy.in_flight_weight_updates=true"],
    ["policy=verl_v1", "policy.trainer_mode=separate_async", "policy.ppo_mini_batch_size=2",
     "policy.parameter_sync_step=2", "policy.max_off_policy_threshold=1", "policy.filter_groups_metric=acc"],
    ["policy=verl_v1", "policy.ppo_mini_batch_size=1", "policy.parameter_sync_step=4"],
    ["policy=trl", "policy.mode=async", "policy.per_device_train_batch_size=4", "policy.num_processes=2",
     "policy.max_staleness=1", "policy.queue_maxsize=6"],
    ["policy=roll", "policy.rollout_batch_size=4"],
    ["policy=roll", "policy.rollout_batch_size=3", "policy.query_filter_type=std_filter", "policy.std_threshold=0"],
    ["policy=slime", "policy.rollout_batch_size=2", "policy.update_weights_interval=2",
     "policy.over_sampling_batch_size=2", "policy.sglang_server_concurrency=8"],
    ["policy=slime", "policy.mode=train_async", "policy.rollout_batch_size=5"],
    ["policy=areal", "policy.dynamic_bs=true", "policy.should_accept_fn=nonzero_std",
     "policy.consumer_batch_size=4", "policy.max_head_offpolicyness=1"],
    # art: the version gate as batches ahead of publications, put-blocked workers, the collapse
    # failsafe; dressage: version-crossing retries and the output-queue watermark; psrl (staleness
    # 0): per-version buffers as a budget, routing only to instances that pulled the dispatch version
    ["policy=art", "policy.max_steps_off_policy=0", "policy.min_batch_size=2", "policy.max_batch_size=5",
     "policy.num_rollout_workers=5"],
    ["policy=art", "policy.min_batch_size=2", "policy.max_batch_size=3", "policy.queue_maxsize=2",
     "policy.num_rollout_workers=5", "policy.rollout_weight_update_mode=in_flight_lora"],
    ["policy=dressage", "policy.rollout_batch_size=3", "policy.async_max_active_groups=6",
     "policy.dressage_staleness_keep_versions=1", "policy.rollout_max_retries=1"],
    ["policy=dressage", "policy.rollout_batch_size=5", "policy.rollout_mode=partial_async", "policy.global_batch_size=6",
     "policy.async_output_queue_size=4", "policy.rollout_max_retries=0", "policy.async_max_active_groups=10"],
    ["policy=psrl", "policy.staleness_buffer_entries=3", "policy.dynamic_sampling_filter=true"],
    ["policy=psrl", "policy.staleness_buffer_entries=4", "policy.partial_rollout_enable=false",
     "policy.enable_multi_priority_queue=true"],
    # a placement the policy declares wins over the deployment's (record field `disaggregated`)
    ["policy=art", "deployment.placement=colocated", "policy.min_batch_size=2"],
    ["policy=trl", "policy.mode=async", "deployment.placement=colocated", "policy.per_device_train_batch_size=4",
     "policy.num_processes=2"],
]
CASES = [[f"policy={k}"] for k in policy_kinds() if not k.startswith("_")] + MODES


def run(cfg, wl, costs):
    sim = build_simulation(cfg, wl, costs)
    sim.run()
    return summarise(sim), sim


scenario = st.fixed_dictionaries({
    "seed": st.integers(0, 10_000),
    "instances": st.integers(1, 3),
    "group_size": st.sampled_from([2, 4]),
    "zero_variance": st.sampled_from([0.0, 0.3]),
    "inflight": st.sampled_from([None, "abort_resume", "keep_pause", "continue", "drain"]),
})


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(x.split("=")[-1] for x in c))
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenario)
def test_an_exact_lowering_simulates_like_the_policy(case, sc):
    over = [*case, "run.training_steps=2", f"deployment.rollout.instances={sc['instances']}",
            "deployment.rollout.max_num_seqs=16"]
    if sc["inflight"] and case[0] == "policy=bounded_async":
        over.append(f"policy.inflight_rule={sc['inflight']}")
    cfg = load_config(overrides=over)
    record = cfg.policy.lower(LoweringContext(group_size=sc["group_size"], instances=sc["instances"]))
    if not record.fast_path_exact:
        return  # nothing claimed
    wl = random_workload(groups=24, n=sc["group_size"], seed=sc["seed"], completion=(50, 1500),
                         zero_variance=sc["zero_variance"])
    want, sim_a = run(cfg, wl, linear_costs(step_s=3.0, sync_s=0.5))
    got, sim_b = run(attrs.evolve(cfg, policy=ParamsPolicy(record)), wl, linear_costs(step_s=3.0, sync_s=0.5))
    assert want.diagnosis == got.diagnosis
    assert want.steps == got.steps
    assert want.calls == got.calls
    assert want.totals == got.totals
    assert want.instances == got.instances
    assert sim_a.events == sim_b.events


def test_the_test_covers_every_claimed_exact_kind():
    ctx = LoweringContext(group_size=4, instances=2)
    claimed = {c[0].split("=")[1] for c in CASES if load_config(overrides=c).policy.lower(ctx).fast_path_exact}
    assert claimed >= {"sync", "bounded_async", "areal", "skyrl", "trl", "verl", "verl_v1", "openrlhf", "nemo_rl", "roll", "slime",
                       "art", "dressage", "psrl"}


def test_every_preset_but_prime_rl_is_exact_at_its_defaults():
    # prime_rl's AIMD permits (KV usage read at polls, time windows, cancellations) have no field
    ctx = LoweringContext(group_size=4, instances=2)
    exact = {k: load_config(overrides=[f"policy={k}"]).policy.lower(ctx).fast_path_exact
             for k in policy_kinds() if not k.startswith("_")}
    assert {k for k, e in exact.items() if not e} == {"prime_rl"}


#: each record extension of art, dressage and psrl, on a scenario where it decides something:
#: removing it from the lowered record changes the run (so the exactness cases exercise it)
EXTENSIONS = [
    (["policy=art", "policy.max_steps_off_policy=0", "policy.min_batch_size=2", "policy.max_batch_size=5",
      "policy.num_rollout_workers=5"], 3.0, "admit_max_batches_ahead", -1),
    (["policy=art", "policy.min_batch_size=2", "policy.max_batch_size=3", "policy.queue_maxsize=2",
      "policy.num_rollout_workers=5"], 30.0, "admit_queue_blocks_groups", float("inf")),
    (["policy=dressage", "policy.rollout_batch_size=3", "policy.async_max_active_groups=6",
      "policy.rollout_max_retries=1"], 3.0, "fail_on_version_crossing", -1),
    (["policy=dressage", "policy.rollout_batch_size=3", "policy.async_max_active_groups=6",
      "policy.rollout_max_retries=1"], 3.0, "fail_on_version_crossing", 0),
    (["policy=psrl", "policy.staleness_buffer_entries=3"], 3.0, "route_needs_dispatch_version", 0),
]


@pytest.mark.parametrize("case, step_s, field, off", EXTENSIONS, ids=lambda x: x if isinstance(x, str) else None)
def test_each_new_extension_is_exact_and_decides_something(case, step_s, field, off):
    cfg = load_config(overrides=[*case, "run.training_steps=3", "deployment.rollout.instances=2"])
    record = cfg.policy.lower(LoweringContext(group_size=4, instances=2))
    assert record.fast_path_exact
    wl = random_workload(groups=24, n=4, seed=3, completion=(50, 1500))
    costs = linear_costs(step_s=step_s, sync_s=0.5)
    want, sim_a = run(cfg, wl, costs)
    got, sim_b = run(attrs.evolve(cfg, policy=ParamsPolicy(record)), wl, costs)
    assert (want.steps, sim_a.events) == (got.steps, sim_b.events)
    _, sim_c = run(attrs.evolve(cfg, policy=ParamsPolicy(attrs.evolve(record, **{field: off}))), wl, costs)
    assert sim_c.events != sim_a.events


def test_the_collapse_failsafe_stops_the_record_where_it_stops_art():
    # 2 x min_batch_size = 4 zero-variance discards between two batches: both stop at the same
    # event; the preset's error is ART's text, the record's names its field
    cfg = load_config(overrides=["policy=art", "policy.discard_queue_multiplier=2", "policy.min_batch_size=2"])
    record = cfg.policy.lower(LoweringContext(group_size=4, instances=2))
    assert record.collapse_zero_variance_groups == 4
    wl = random_workload(groups=24, n=4, seed=3, completion=(50, 1500), zero_variance=0.8)
    costs = linear_costs(step_s=3.0, sync_s=0.5)
    sims = []
    for pol in (cfg.policy, ParamsPolicy(record)):
        sim = build_simulation(attrs.evolve(cfg, policy=pol), wl, costs)
        with pytest.raises(SimulationError, match="MODEL COLLAPSE DETECTED") as err:
            sim.run()
        sims.append((sim, str(err.value)))
    (a, msg_a), (b, msg_b) = sims
    assert a.events == b.events and len(a.events) > 0
    assert "discard_queue_multiplier" in msg_a and "collapse_zero_variance_groups=4" in msg_b


def test_a_record_that_differs_from_the_policy_is_caught():
    # The same comparison, with one admission number off by one: it must see the difference.
    cfg = load_config(overrides=["policy=skyrl", "policy.max_staleness_steps=1", "policy.policy_mini_batch_size=4",
                                 "policy.num_parallel_generation_workers=6", "run.training_steps=2"])
    record = cfg.policy.lower(LoweringContext(group_size=4, instances=2))
    wrong = attrs.evolve(record, admit_concurrency_groups=record.admit_concurrency_groups - 1)
    wl = random_workload(groups=24, n=4, seed=1, completion=(50, 1500))
    a, sim_a = run(cfg, wl, linear_costs(step_s=3.0, sync_s=0.5))
    b, sim_b = run(attrs.evolve(cfg, policy=ParamsPolicy(wrong)), wl, linear_costs(step_s=3.0, sync_s=0.5))
    assert a.steps != b.steps or sim_a.events != sim_b.events
