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
from simrl.engine.sim import build_simulation, summarise
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
    assert claimed >= {"sync", "bounded_async", "areal", "skyrl", "trl", "verl", "verl_v1", "openrlhf", "nemo_rl", "roll", "slime"}


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
