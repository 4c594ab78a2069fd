"""Per-preset conformance: a small scenario whose trace is derived by hand from the upstream code.

Every scenario: 64 single-turn groups of 2 samples, prompt 200 and completion 1000 tokens each
(`uniform_workload`), linear costs, 1 s training steps, 2 rollout instances unless said, 3
steps. Nothing finishes before t = 5 s (1000 decode iterations of >= 5 ms each), so "groups
dispatched at t = 0" is exactly the preset's initial admission. The expected values below are
worked out from the cited upstream file and line; the commits are those the presets follow
(each module's docstring). psrl, slime and roll keep their upstream-derived tests in
test_psrl.py, test_slime.py and test_roll.py.
"""

from __future__ import annotations

import math

import pytest
from preset_scenarios import run, uniform_workload

from simrl.policy.base import GroupRecord, InstanceLoad, PipelineState, TrajRecord
from simrl.policy.registry import policy_class


def _scenario(*overrides, steps=3, **kw):
    wl = uniform_workload(groups=64, n=2, completion=1000)
    return run([*overrides, f"run.training_steps={steps}"], wl, step_s=1.0, **kw)


def _dispatch_times(sim) -> list[float]:
    return [e["t"] for e in sim.events if e["kind"] == "group_dispatch"]


def _at_zero(sim) -> int:
    return sum(1 for t in _dispatch_times(sim) if t == 0.0)


def _staleness(rep) -> list[list[int]]:
    return [list(s.staleness) for s in rep.steps]


def test_areal_admission_is_the_staleness_managers_capacity():
    # inclusionAI/AReaL@4aef98d8 areal/infra/staleness_manager.py:79-113: capacity =
    # min(max_concurrent_rollouts - running, (ofp + v + 1) * consumer_bs - (accepted + running)).
    # B = 4, ofp = 1, max_concurrent 16, v = 0: min(16, (1+0+1)*4 = 8) = 8 start at t = 0.
    # Batch 1 = the first 4 finished (v0 rollouts, trained on v0: staleness 0); batch 2 = the
    # other 4 of v0, trained on v1: 1; after v1 the budget is (1+1+1)*4 = 12, so 4 start on v1
    # and make batch 3, trained on v2: 1.
    rep, sim = _scenario("policy=areal", "policy.max_head_offpolicyness=1", "policy.consumer_batch_size=4",
                         "policy.max_concurrent_rollouts=16")
    assert _at_zero(sim) == 8
    assert _staleness(rep) == [[0] * 4, [1] * 4, [1] * 4]
    # cli_args.py:2024-2029: max_concurrent_rollouts None -> consumer_batch_size: min(4, 8) = 4
    _, sim = _scenario("policy=areal", "policy.max_head_offpolicyness=1", "policy.consumer_batch_size=4")
    assert _at_zero(sim) == 4


def test_skyrl_capacity_is_workers_and_staleness_window():
    # NovaSky-AI/SkyRL@a9564572 skyrl/train/fully_async_trainer.py:181-187: capacity =
    # min(K - running, (S + g) * B - (accepted + running)), g = global_step (1 at start, +1 before
    # notify, :596-598/:662); :355-362 requires B <= K <= B(S+1) = 12.
    # B = 4, S = 2, K = 12: min(12, (2+1)*4) = 12 at t = 0; K = 8: 8. Nothing is dropped, so
    # batch k trains the k-th 4 finished groups, all dispatched at v0: staleness 0, 1, 2.
    rep, sim = _scenario("policy=skyrl", "policy.max_staleness_steps=2", "policy.policy_mini_batch_size=4",
                         "policy.num_parallel_generation_workers=12")
    assert _at_zero(sim) == 12
    assert _staleness(rep) == [[0] * 4, [1] * 4, [2] * 4]
    _, sim = _scenario("policy=skyrl", "policy.max_staleness_steps=2", "policy.policy_mini_batch_size=4",
                       "policy.num_parallel_generation_workers=8")
    assert _at_zero(sim) == 8


@pytest.mark.parametrize(("instances", "expected"), [(2, 32), (4, 35)])
def test_verl_fully_async_concurrency_is_min_of_servers_and_sample_budget(instances, expected):
    # volcengine/verl@b178a3cd verl/experimental/fully_async_policy/fully_async_rollouter.py:195-209:
    # M = max_required_samples = int(R * (1 + t) * trigger) with the defaults of
    # config/fully_async_ppo_trainer.yaml:12-25 (t = 0.1, trigger 4) and R = 8 (ours):
    # int(8 * 1.1 * 4) = 35; max_concurrent_samples = min(16 * servers, M): 2 servers -> 32,
    # 4 servers -> 35 started at t = 0.
    _, sim = _scenario("policy=verl", f"deployment.rollout.instances={instances}")
    assert _at_zero(sim) == expected


def test_verl_v1_replay_buffer_depth_is_warmup_plus_one_batches():
    # verl-project/verl@1dda039b verl/trainer/ppo/v1/replay_buffer.py:93-113 (constant depth, an
    # evicted group is refilled): separate_async with num_warmup_batches 1 keeps
    # (warmup + v + 1) * B in flight + buffered, B = parameter_sync_step * ppo_mini_batch_size =
    # 2 * 2 = 4: 8 start at t = 0. Batches are oldest dispatch first: batch 1 the first 4 (v0,
    # trained on v0: 0), batch 2 the next 4 of v0 on v1: 1; 4 refill at v1 and make batch 3: 1.
    rep, sim = _scenario("policy=verl_v1", "policy.trainer_mode=separate_async", "policy.ppo_mini_batch_size=2",
                         "policy.parameter_sync_step=2")
    assert _at_zero(sim) == 8
    assert _staleness(rep) == [[0] * 4, [1] * 4, [1] * 4]


def test_openrlhf_one_batch_generates_at_a_time_under_the_lock():
    # OpenRLHF/OpenRLHF@3c3be623 ppo_trainer_async.py:108-157: the producer takes a queue slot
    # (Q = async_queue_size tokens, :287-297), takes the lock (no partial rollout), generates the
    # WHOLE batch, releases, puts. With Q = 2 and B = 4: 4 groups at t = 0 and the next 4 exactly
    # when the last group of batch 1 finishes (the lock is released), not at t = 0.
    rep, sim = _scenario("policy=openrlhf", "policy.async_queue_size=2", "policy.rollout_batch_size=4")
    times = _dispatch_times(sim)
    assert times[:4] == [0.0] * 4
    batch1_done = max(e["t"] for e in sim.events if e["kind"] == "group_done" and e["gid"] < 4)
    assert times[4:8] == [batch1_done] * 4
    # the broadcast also waits for the batch in progress, so staleness stays at 1 (:255-265)
    assert _staleness(rep) == [[0] * 4, [1] * 4, [1] * 4]


def test_dressage_active_groups_cap():
    # Accio-Lab/Dressage@de8e8694 rollout/fully_async_rollout.py:294-304: at most MAX_ACTIVE_GROUPS
    # (async_max_active_groups) groups active; the output queue (1000, watermark 0.8) is far
    # from full. 6 start at t = 0.
    _, sim = _scenario("policy=dressage", "policy.rollout_batch_size=4", "policy.async_max_active_groups=6")
    assert _at_zero(sim) == 6


def test_nemo_rl_reserves_every_target_of_the_age_window():
    # NVIDIA-NeMo/RL@7ea279ab nemo_rl/algorithms/async_utils/trajectory_collector.py:189-217: the
    # targets are v0..v0+L at start; :219-255 reserves the lowest short target and dispatches its
    # missing groups. L = 2, B = 4: targets 0, 1, 2, so 12 start at t = 0. Batch k is the 4 groups
    # generated for target k-1, all dispatched at v0: staleness 0, 1, 2.
    rep, sim = _scenario("policy=nemo_rl", "policy.max_trajectory_age_steps=2", "policy.num_prompts_per_step=4")
    assert _at_zero(sim) == 12
    assert _staleness(rep) == [[0] * 4, [1] * 4, [2] * 4]


def test_trl_async_inflight_tasks_default():
    # huggingface/trl@f2cd5771 trl/experimental/async_grpo/async_grpo_config.py:272-295:
    # max_inflight_tasks = -1 -> max_staleness * samples per optimizer step. Samples per step =
    # per_device 2 * processes 2 * grad accum 1 = 4 = 2 groups of 2; S = 2: 8 samples = 4 groups
    # at t = 0. Nothing is stale past S: batches trained at staleness 0, 1, 2.
    rep, sim = _scenario("policy=trl", "policy.mode=async", "policy.max_staleness=2",
                         "policy.per_device_train_batch_size=2", "policy.num_processes=2")
    assert _at_zero(sim) == 4
    assert _staleness(rep) == [[0] * 2, [1] * 2, [2] * 2]


def test_art_one_group_per_rollout_worker():
    # OpenPipe/ART src/art/pipeline_trainer/trainer.py (constructor defaults; workers each run one
    # group at a time): num_rollout_workers = 3 -> 3 groups at t = 0, and the next 3 only when
    # those finish (a worker picks its next group after putting the last one).
    _, sim = _scenario("policy=art", "policy.num_rollout_workers=3")
    times = _dispatch_times(sim)
    assert times[:3] == [0.0] * 3
    first_done = min(e["t"] for e in sim.events if e["kind"] == "group_done")
    assert min(t for t in times if t > 0.0) == first_done


def test_prime_rl_pessimistic_start_and_admission_window():
    # PrimeIntellect-ai/prime-rl@559b4477:
    # * concurrency.py:252-262: without initial_inflight, the first poll sets the cap to
    #   KV capacity / max_model_len = 2 instances * 40 000 / 10 000 = 8 episodes.
    # * dispatcher.py:280-287: the pool may grow by burst_cap = max(group size, cap // 10) =
    #   max(2, 0) = 2 episodes per 5 s window: one group (2 episodes) at t = 0, the next when the
    #   window restarts at t = 5.0 (the first group, 1000 decode iterations, is still running).
    # * dispatcher.py:555-561: a natural completion refunds its admissions, so the third group
    #   starts at the first group's finish, inside the second window.
    rep, sim = _scenario("policy=prime_rl", "policy.batch_size=8", "policy.max_model_len=10000",
                         "deployment.rollout.kv_capacity_tokens=40000")
    assert sim.st.policy_state.cap_history[0] == (0.0, 8)
    times = _dispatch_times(sim)
    first_done = min(e["t"] for e in sim.events if e["kind"] == "group_done")
    assert times[:2] == [0.0, 5.0] and first_done > 5.0
    assert times[2] == first_done
    # The earlier law (014aa9d0 dispatcher.py:215-226, no refund) waits for the next window.
    _, old = _scenario("policy=prime_rl", "policy.batch_size=8", "policy.max_model_len=10000",
                       "deployment.rollout.kv_capacity_tokens=40000", "policy.concurrency_control=kappa_ewma",
                       "policy.seq_len=10000")
    assert _dispatch_times(old)[:3] == [0.0, 5.0, 10.0]


# -- prime_rl's AIMD controller, hook by hook (concurrency.py@559b4477) ------------------------------

def _prime_state(policy, running_groups, loads):
    st = PipelineState(n_instances=len(loads), policy_state=policy.init_state())
    for gid, (t0, unfinished) in enumerate(running_groups):
        st.running[gid] = GroupRecord(gid=gid, wg=gid, epoch=0, dispatch_time=t0, dispatch_version=0,
                                      trajs=[TrajRecord(tid=i, reward=float(i % 2), calls_total=1)
                                             for i in range(unfinished)])
    st.probe = lambda: loads
    return st


def _loads(*usage, waiting=0, preemptions=0):
    return [InstanceLoad(index=i, version=0, running=8, waiting=waiting, kv_used_tokens=int(u * 1000),
                         kv_capacity_tokens=1000, preemptions=preemptions) for i, u in enumerate(usage)]


def test_prime_rl_kv_trims_soft_then_hard_cancel_youngest():
    policy = policy_class("prime_rl")(initial_inflight=100)
    # 10 running groups of 8 unfinished episodes, dispatched at t = 0..9: 80 in flight.
    groups = [(float(t), 8) for t in range(10)]
    # Soft trim (concurrency.py:281-290): max usage 0.85 > 0.8 and <= 0.9: cap -> int(80 * 0.7 / 0.85)
    # = int(65.88) = 65, nothing cancelled; the 6-poll cooldown then blocks the next trim.
    st = _prime_state(policy, groups, _loads(0.5, 0.85))
    assert policy.admit(st) is False  # 80 in flight >= 65
    c = st.policy_state
    assert c.cap == 65 and c.trims == [(0.0, "soft trim", 65)] and c.pending_cancel == 0
    # Hard trim: usage 0.95 > 0.9 -> int(80 * 0.7 / 0.95) = int(58.95) = 58 and cancel 80 - 58 = 22
    # episodes, youngest groups first (dispatcher.py:258-278): gid 9, 8, 7 (8 + 8 + 8 >= 22).
    st = _prime_state(policy, groups, _loads(0.95, 0.2))
    policy.admit(st)
    assert st.policy_state.cap == 58 and st.policy_state.pending_cancel == 22
    assert policy.after_group_done(st).abort_running == (9, 8, 7)
    # A preemption instead (concurrency.py:267-279): cut to int(80 * 0.8) = 64, cancel 16: gid 9, 8.
    st = _prime_state(policy, groups, _loads(0.5, 0.5))
    policy.admit(st)  # first poll: records the preemption counters
    st.probe = (lambda: _loads(0.5, 0.5, preemptions=1))
    st.now = 5.0
    policy.admit(st)
    assert st.policy_state.cap == 64 and st.policy_state.draining
    assert policy.after_group_done(st).abort_running == (9, 8)


def test_prime_rl_growth_is_paced_by_turnover():
    policy = policy_class("prime_rl")(initial_inflight=10)
    # One running group with 8 unfinished episodes; a group of 2 finishes. Clear poll (usage 0.1,
    # no queue): the gate is open for 15 s. record_episode (concurrency.py:166-187) per episode,
    # in finish order, with in flight = the others + its unfinished group-mates + itself:
    # 8 + 1 + 1 = 10 >= 0.9 * 10 -> cap * 1.25^(1/10); then 8 + 0 + 1 = 9 >= 9 -> * 1.25^(1/9).
    st = _prime_state(policy, [(0.0, 8)], _loads(0.1, 0.1))
    policy.admit(st)
    done = GroupRecord(gid=99, wg=99, epoch=0, dispatch_time=0.0, dispatch_version=0,
                       trajs=[TrajRecord(tid=i, reward=float(i), calls_total=1, completion_tokens=100,
                                         finish_time=1.0 + i) for i in range(2)])
    st.now = 2.0
    policy.on_group_done(done, st)
    c = st.policy_state
    assert math.isclose(c.turnover, 1 / 10 + 1 / 9)
    assert math.isclose(c.cap_f, 10 * 1.25 ** (1 / 10 + 1 / 9))  # 10.48: the applied cap stays 10
    assert c.cap == 10
