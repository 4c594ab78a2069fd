"""The engine's rules, one scenario each: KV policies, prefix cache, in-flight rules, placement."""

import attrs
import pytest
from simhelpers import linear_costs, multi_turn_workload, random_workload, run_sim

from simrl.engine.core import SimulationError
from simrl.policy.base import InflightRule, Policy
from simrl.policy.builtin import BoundedAsyncPolicy
from simrl.policy.registry import register
from workloads.types import build_workload, single_turn_group

ROLLOUT_BOUND = ["policy=bounded_async", "policy.max_staleness=2", "policy.batch_groups=8"]


def kv_samples_within_capacity(sim):
    return all(s[4] <= sim.kv_capacity for s in sim.samples)


def test_on_demand_preempts_newest_and_still_finishes_reserve_never_preempts():
    wl = random_workload(groups=24, completion=(500, 3000))
    r_od, sim_od = run_sim(ROLLOUT_BOUND + ["deployment.rollout.kv_policy=on_demand"], wl,
                           linear_costs(kv_tokens=40_000, step_s=2))
    r_rs, sim_rs = run_sim(ROLLOUT_BOUND + ["deployment.rollout.kv_policy=reserve"], wl,
                           linear_costs(kv_tokens=40_000, step_s=2))
    assert r_od.diagnosis is None and r_rs.diagnosis is None
    assert r_od.totals["preemptions"] > 0
    assert r_rs.totals["preemptions"] == 0
    assert r_od.totals["tokens_reprefilled"] > 0
    assert kv_samples_within_capacity(sim_od) and kv_samples_within_capacity(sim_rs)
    for inst in sim_od.instances + sim_rs.instances:
        assert inst.kv_used + inst.cache_tokens <= inst.capacity


def test_multi_turn_continuation_reuses_context_unless_salted():
    wl = multi_turn_workload(groups=4, n=2, turns=3, prompt=400, obs=100, completion=200)
    _, sim = run_sim(["policy=sync", "policy.batch_groups=4", "deployment.rollout.instances=1",
                      "run.training_steps=1"], wl)
    later = [e["prefill"] for e in sim.events if e["kind"] == "call_admit" and e["prefill"] not in (0, 400)]
    assert later and set(later) == {100}  # only the new observation tokens
    salted = multi_turn_workload(groups=4, n=2, turns=3, prompt=400, obs=100, completion=200, salted=True)
    _, sim2 = run_sim(["policy=sync", "policy.batch_groups=4", "deployment.rollout.instances=1",
                       "run.training_steps=1"], salted)
    prefills = sorted({e["prefill"] for e in sim2.events if e["kind"] == "call_admit"})
    assert prefills == [400, 700, 1000]  # every call prefills its whole prompt


@pytest.mark.parametrize("rule", [r.value for r in InflightRule])
def test_inflight_rules(rule):
    wl = random_workload(groups=40, completion=(200, 4000))
    report, sim = run_sim(ROLLOUT_BOUND + [f"policy.inflight_rule={rule}"], wl, linear_costs(step_s=1.0))
    t = report.totals
    assert report.diagnosis is None
    assert t["staleness_max"] <= 2
    if rule in ("abort_resume", "abort_restart"):
        assert t["aborts"] > 0
    else:
        assert t["aborts"] == 0
    assert (t["tokens_wasted_abort"] > 0) == (rule == "abort_restart")
    if rule == "drain":
        # Nothing is generating while weights are published.
        for step in report.steps:
            for c in report.calls:
                assert not (c.arrival < step.train_end and c.finish > step.publish_end)
    if rule == "continue":
        assert all(c.version_start == c.version_end for c in report.calls)
    if rule == "keep_pause":
        assert any(c.version_end > c.version_start for c in report.calls)


@register
@attrs.frozen
class _PerInstancePolicy(BoundedAsyncPolicy):
    """Test-only: bounded_async with PSRL-style per-instance pulls."""

    kind = "_test_per_instance"

    def record(self):
        return attrs.evolve(super().record(), sync_per_instance=1)


def test_per_instance_pull_pauses_only_that_instance():
    wl = random_workload(groups=40, completion=(200, 3000))
    report, sim = run_sim(["policy=_test_per_instance", "policy.max_staleness=2", "policy.batch_groups=8",
                           "deployment.rollout.instances=3"], wl, linear_costs(step_s=1.0, sync_s=2.0))
    pulls = [e for e in sim.events if e["kind"] == "pull_start"]
    assert report.diagnosis is None
    assert {e["inst"] for e in pulls} == {0, 1, 2}
    # Pulls are staggered: not all instances start pulling the same version at the same instant.
    by_version = {}
    for e in pulls:
        by_version.setdefault(e["version"], set()).add(e["t"])
    assert any(len(ts) > 1 for ts in by_version.values())


def test_colocated_rollout_is_idle_while_training():
    report, sim = run_sim(["policy=sync", "policy.batch_groups=4", "deployment.placement=colocated",
                           "run.training_steps=3"], random_workload(groups=12), linear_costs(step_s=5.0))
    assert report.diagnosis is None
    for step in report.steps:
        busy = [e for e in sim.events if e["kind"] in ("call_admit", "call_finish")
                and step.train_start < e["t"] < step.train_end]
        assert busy == []


def test_a_call_larger_than_kv_is_an_error_naming_it():
    wl = build_workload("big", 0, [single_turn_group(0, 2, 5000, [6000, 10])])
    with pytest.raises(SimulationError, match=r"needs 11000 KV tokens .* holds 8000"):
        run_sim(["policy=sync", "policy.batch_groups=1"], wl, linear_costs(kv_tokens=8000))


@register
@attrs.frozen
class _NeverAdmits(Policy):
    """Test-only: admission that never opens."""

    kind = "_test_never_admits"

    def admit(self, st):
        return False

    def form_batch(self, st):
        return None


def test_deadlock_stops_with_a_diagnosis():
    report, _ = run_sim(["policy=_test_never_admits"], random_workload(groups=4), linear_costs())
    assert report.diagnosis is not None
    assert "no progress possible" in report.diagnosis
    assert "admission closed" in report.diagnosis
    assert report.totals["training_steps"] == 0


def test_every_group_dropped_stops_with_a_diagnosis_instead_of_hanging():
    # 4 prompt groups, all with identical rewards, under a zero-variance filter: every group is
    # dropped. The limit is max(2 passes x 4 groups, 64) = 64 rejected finishes in a row.
    wl = random_workload(groups=4, zero_variance=1.0)
    with pytest.raises(SimulationError, match=r"no progress: the last 64 finished groups .* policy areal"):
        run_sim(["policy=areal", "policy.should_accept_fn=nonzero_std"], wl, linear_costs())
    # one prompt group with reward variance is enough: groups are accepted and training finishes
    mixed = random_workload(groups=4, zero_variance=0.7, seed=3)
    assert any(mixed.traj_reward[t] != mixed.traj_reward[mixed.group_trajs(g)[0]]
               for g in range(4) for t in mixed.group_trajs(g))
    report, _ = run_sim(["policy=areal", "policy.should_accept_fn=nonzero_std", "run.training_steps=2"], mixed,
                        linear_costs())
    assert report.totals["training_steps"] == 2 and report.totals["trajectories_dropped"] > 0


def test_time_horizon_stops_the_run():
    report, _ = run_sim(["policy=sync", "run.time_horizon_s=5"], random_workload(groups=64), linear_costs())
    assert report.diagnosis is not None and "time horizon" in report.diagnosis


def test_training_layout_that_does_not_fit_is_an_error():
    costs = linear_costs()
    costs.training.capacity_bytes = -1.0
    with pytest.raises(SimulationError, match="GiB per GPU"):
        run_sim(["policy=sync", "policy.batch_groups=2"], random_workload(groups=4), costs)


def test_active_cap_bounds_residency():
    report, sim = run_sim(["policy=sync", "policy.batch_groups=8", "router.active_cap=5",
                           "deployment.rollout.instances=2", "run.training_steps=2"],
                          random_workload(groups=16), linear_costs())
    assert report.diagnosis is None
    assert max(s[2] + s[3] for s in sim.samples) <= 5


@pytest.mark.parametrize("router", ["round_robin", "least_requests", "throughput_balance", "kv_cache_aware"])
def test_every_router_spreads_load_and_finishes(router):
    report, sim = run_sim(["policy=sync", "policy.batch_groups=8", f"router.name={router}",
                           "deployment.rollout.instances=3", "run.training_steps=2"],
                          random_workload(groups=16), linear_costs())
    assert report.diagnosis is None
    used = {c.instance for c in report.calls}
    assert used == {0, 1, 2} or router == "kv_cache_aware"


def test_dp_shard_gives_each_instance_one_contiguous_slice_of_the_batch():
    # NeMo-RL's sync generation (shard_by_batch_size(dp_size, allow_uneven_shards=True)): 2 groups
    # x 6 = 12 calls over 3 instances -> ceil(12 / 3) = 4 consecutive calls each, so group 0's
    # calls 0-3 on instance 0, its 4-5 and group 1's 0-1 on instance 1, group 1's 2-5 on instance 2;
    # the next step's batch starts again at instance 0.
    report, sim = run_sim(["policy=sync", "policy.batch_groups=2", "router.name=dp_shard",
                           "deployment.rollout.instances=3", "run.training_steps=2"],
                          random_workload(groups=4, n=6), linear_costs())
    assert report.diagnosis is None and sim.router.shard_calls == 4
    routed = [c.instance for c in sorted(report.calls, key=lambda c: c.tid)[:24]]
    assert routed == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2] * 2


def test_dp_shard_calls_by_hand_and_refusals():
    from simrl.config import RouterConfig
    from simrl.engine.router import dp_shard_calls

    cfg = RouterConfig(name="dp_shard")
    assert dp_shard_calls(cfg, 64, [32] * 100, 16) == 128  # NeMo-RL Llama card: 64 x 32 / 16 engines
    assert dp_shard_calls(cfg, 3, [5] * 9, 4) == 4  # ceil(15 / 4): the last slice is shorter (3)
    assert dp_shard_calls(RouterConfig(name="dp_shard", shard_calls=7), 0, [1, 2], 4) == 7  # given
    assert dp_shard_calls(RouterConfig(), 64, [32], 16) == 0  # any other router: no slices
    with pytest.raises(ValueError, match="router.shard_calls"):
        dp_shard_calls(cfg, 2, [3, 4], 2)  # unequal groups: the slice is not derivable


def test_round_robin_cycles_instances_in_order():
    report, _ = run_sim(["policy=sync", "policy.batch_groups=1", "router.name=round_robin",
                         "deployment.rollout.instances=3", "run.training_steps=1"],
                        random_workload(groups=1, n=6), linear_costs())
    routed = [c.instance for c in sorted(report.calls, key=lambda c: c.tid)[:6]]
    assert routed == [0, 1, 2, 0, 1, 2]
