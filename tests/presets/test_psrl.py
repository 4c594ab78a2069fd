"""PSRL: a straggler's reservation holds its buffer, so the step consuming it waits for the tail."""

import pytest
import simpy
from preset_scenarios import group_finish, run, uniform_workload

from simrl.config import ConfigError, load_config
from simrl.engine.records import Request
from simrl.engine.router import Router
from simrl.policy.base import GroupRecord, TrajRecord
from simrl.policy.registry import policy_class
from workloads.types import build_workload, single_turn_group

STRAGGLER = 3  # workload group 3 is dispatched first, as gid 3


def test_step_waits_for_the_straggler_holding_a_reservation():
    wl = uniform_workload(groups=48, n=4, completion=100, stragglers=(STRAGGLER,), straggler_completion=4000)
    rep, sim = run(["policy=psrl", "policy.staleness=1", "policy.staleness_buffer_entries=8"], wl, step_s=2.0)
    tail = group_finish(rep, STRAGGLER)
    # Dispatched at version 0, the straggler reserved an entry of buffer 0 + eta = 1: buffer 1
    # stays STUCK (7 occupied + 1 reserved) and step 2 starts exactly when the straggler finishes.
    assert rep.steps[1].batch_ready == tail
    assert rep.steps[0].batch_ready < 2.0 < tail
    finished_before = {c.gid for c in rep.calls if c.gid != STRAGGLER and group_finish(rep, c.gid) < tail}
    assert len(finished_before) >= 2 * 8  # plenty of finished groups, none may take its entry
    assert rep.totals["staleness_max"] <= 1 and rep.totals["trajectories_dropped"] == 0


def test_bound_holds_with_per_instance_pulls():
    wl = uniform_workload(groups=48, n=4, completion=300, stragglers=(1, 9, 17), straggler_completion=2500)
    rep, sim = run(["policy=psrl", "policy.staleness=2", "policy.staleness_buffer_entries=8",
                    "deployment.rollout.instances=3"], wl, step_s=1.0)
    assert rep.totals["staleness_max"] <= 2
    pulls = [e for e in sim.events if e["kind"] == "pull_end"]
    # Each instance pulls on its own: one version lands on different instances at different times.
    by_version = {}
    for e in pulls:
        by_version.setdefault(e["version"], set()).add(e["t"])
    assert len(by_version) >= len(rep.steps) - 1
    assert any(len(ts) > 1 for ts in by_version.values())
    assert rep.totals["aborts"] > 0  # partial rollout: requests on a pulling instance are re-routed


# Upstream: Somoku/psrl@19c0474, psrl/workers/ps/staleness_controller.py.
#   reserve_data (:607-725): candidates are buffers in [max_id - staleness, max_id] with an EMPTY
#   entry (:698-703), max_id = v + staleness; target_buffer_id = max(candidate_ids) (:712).
#   clear_reserved_entries(move_across_buffer=True) (:948, search :1012-1033) refills the
#   vacated entry from an earlier buffer; occupy_data_with_reserve (:1147) then occupies
#   min(candidate_ids) (:1201-1222).


def _dispatch_times(sim):
    return [e["t"] for e in sim.events if e["kind"] == "group_dispatch"]


def test_reserve_falls_back_across_buffers_eta_plus_one_batches_in_flight():
    # eta=2, E=4, version 0, 4 instances (every call starts at once): buffers 2, 1, 0 each take
    # 4 reservations (highest first), so (2+1) x 4 = 12 groups start at t=0 and the 13th waits
    # for a group to finish (every completion is 1000 tokens; nothing finishes at t=0).
    wl = uniform_workload(groups=48, n=2, completion=1000)
    rep, sim = run(["policy=psrl", "policy.staleness=2", "policy.staleness_buffer_entries=4",
                    "deployment.rollout.instances=4"], wl, step_s=1.0)
    times = _dispatch_times(sim)
    first_done = min(e["t"] for e in sim.events if e["kind"] == "group_done")
    assert sum(1 for t in times if t == 0.0) == 12
    assert min(t for t in times if t > 0.0) >= first_done
    assert rep.totals["staleness_max"] <= 2


def test_a_finished_group_pulls_an_earlier_reservation_into_its_slot():
    # eta=1, E=2, one instance. At version 0: g0, g1 reserve buffer 1 (the highest with room),
    # g2, g3 fall back to buffer 0. g3 is the straggler (4000 tokens).
    # g0 done (100 tok): leaves buffer 1; the latest reservation of buffer 0 with V_traj >= 1-1
    #   is g3: it moves to buffer 1; g0 occupies buffer 0 (earliest with an EMPTY entry).
    # g1 done (200 tok): g2 moves from buffer 0 to buffer 1; g1 occupies buffer 0 -> READY.
    # So step 1 trains {g0, g1} as soon as g1 is done, not when the straggler is; step 2 (buffer 1:
    # g2 occupied, g3 reserved) waits for g3. Without the move g3's fallback reservation would
    # keep buffer 0 STUCK until 4000 tokens are out.
    groups = [single_turn_group(0, 2, 100, [100, 100], [0.0, 1.0]),
              single_turn_group(1, 2, 100, [200, 200], [0.0, 1.0]),
              single_turn_group(2, 2, 100, [300, 300], [0.0, 1.0]),
              single_turn_group(3, 2, 100, [4000, 100], [0.0, 1.0])]
    groups += [single_turn_group(g, 2, 100, [100, 100], [0.0, 1.0]) for g in range(4, 16)]
    wl = build_workload("move", 0, groups)
    rep, sim = run(["policy=psrl", "policy.staleness=1", "policy.staleness_buffer_entries=2",
                    "run.training_steps=2"], wl, step_s=0.5)
    assert sum(1 for t in _dispatch_times(sim) if t == 0.0) == 4
    assert rep.steps[0].batch_ready == group_finish(rep, 1) < group_finish(rep, 3)
    assert rep.steps[1].batch_ready == group_finish(rep, 3)
    assert sorted(rep.steps[0].staleness) == [0, 0]


def test_seamless_train_version_pulls_only_once_the_next_buffer_is_ready():
    # Somoku/psrl@19c0474 psrl/workers/gen/rollout_coordination/sync_and_migrate/greedy.py:60-66:
    # while seamless_train_version >= ps_model_version p, an instance lagging the PS skips the
    # sync unless p is in ready_buffers (buffer p, the trainer's next, is READY;
    # coordinator.py:555-610 adds a buffer when it turns READY and removes p - 1 when p is set).
    # eta=1, E=2, 2 instances, one straggler (group 1, 3000 tokens). The trainer is idle when
    # buffers 1 and 2 turn READY, so each READY time is that step's batch_ready; versions 1 and
    # 2 are pulled by both instances exactly then (both idle, waiting on calls they may not
    # run), version 3 (> 2) as soon as it is pushed.
    wl = uniform_workload(groups=64, n=2, completion=1000, stragglers=(1,), straggler_completion=3000)

    def pulls(sim, v):
        return [e["t"] for e in sim.events if e["kind"] == "pull_start" and e["version"] == v]

    knobs = ["policy=psrl", "policy.staleness=1", "policy.staleness_buffer_entries=2", "run.training_steps=4"]
    rep, sim = run([*knobs, "policy.seamless_train_version=2"], wl, step_s=1.0)
    assert pulls(sim, 1) == [rep.steps[1].batch_ready] * 2
    assert pulls(sim, 2) == [rep.steps[2].batch_ready] * 2
    # version 3 at each instance's next loop turn after the push (within one decode iteration)
    assert len(pulls(sim, 3)) == 2
    assert all(0.0 <= t - rep.steps[2].publish_end < 0.05 for t in pulls(sim, 3))
    assert rep.steps[0].publish_end < rep.steps[1].batch_ready  # version 1 existed long before
    # off (0, the default): greedy pulls version 1 when it is pushed
    rep0, sim0 = run(knobs, wl, step_s=1.0)
    assert len(pulls(sim0, 1)) == 2
    assert all(0.0 <= t - rep0.steps[0].publish_end < 0.05 for t in pulls(sim0, 1))


def test_multi_priority_queue_routes_the_oldest_trajectory_version_first():
    # docs/design/flexible_rollout.md "Multi-Level Queue" (lhy101/psrl_doc_preview@59c3ef46):
    # with routing_strategy.enable_multi_priority_queue requests are queued by V_traj and
    # lower versions are routed first; within a level, arrival order (request_sort_indicator
    # small_id). Calls of groups with V_traj 1, 1, 0, 2, 0 arrive in that order.
    psrl = policy_class("psrl")

    def order(policy):
        router = Router(simpy.Environment(), None, [], policy.eligible, policy.route_priority)
        for rid, v in enumerate([1, 1, 0, 2, 0]):
            g = GroupRecord(gid=rid, wg=rid, epoch=0, dispatch_time=0.0, dispatch_version=v,
                            trajs=[TrajRecord(tid=0, reward=0.0, calls_total=1)])
            router.submit(Request(rid, g, g.trajs[0], 0, 0, 10, 10, 0, 10, False, 0.0))
        return [r.rid for r in router.queue]

    assert order(psrl(enable_multi_priority_queue=True)) == [2, 4, 0, 1, 3]
    assert order(psrl()) == [0, 1, 2, 3, 4]


def test_fine_grain_overlap_pre_step_trains_a_buffer_chunk_by_chunk():
    # Somoku/psrl@19c0474 psrl/utils/config.py:5-91 (resolve_fine_grain_chunk_size): chunk =
    # ppo_mini_batch_size x multiplier = 2 groups (< E = 4); manager.py:1426-1507
    # (_emit_pending_chunks) hands chunk j out once 2 more entries of the buffer are occupied, the
    # last when the buffer is READY; fine_grain_overlap.py:84-195 (pre_step): one optimizer step per
    # chunk, the PS push after the last. eta=1, one straggler (group 1, 3000 tokens) holds buffer
    # 1: step 2's first chunk trains right after version 1 is published (two entries of buffer 1
    # were already occupied), its second only when the straggler lands.
    wl = uniform_workload(groups=64, n=2, completion=1000, stragglers=(1,), straggler_completion=3000)
    knobs = ["policy=psrl", "policy.staleness=1", "policy.staleness_buffer_entries=4", "run.training_steps=3",
             "policy.fine_grain_overlap_granularity=mini_batch", "policy.ppo_mini_batch_size=2",
             "policy.fine_grain_overlap_scope=pre_step"]
    rep, sim = run(knobs, wl, step_s=1.0)
    minis = [(e["step"], e["mini_batch"], e["groups"], e["t"]) for e in sim.events if e["kind"] == "mini_batch_ready"]
    assert [(s, j, n) for s, j, n, _ in minis] == [(1, 1, 2), (1, 2, 2), (2, 1, 2), (2, 2, 2), (3, 1, 2), (3, 2, 2)]
    step2 = [t for s, _, _, t in minis if s == 2]
    assert step2[0] == rep.steps[0].publish_end
    straggler_done = next(e["t"] for e in sim.events if e["kind"] == "group_done" and e["gid"] == 1)
    assert step2[1] == straggler_done > step2[0] + 1.0
    assert [list(s.staleness) for s in rep.steps] == [[0] * 4, [1] * 4, [1] * 4]
    # without it the whole buffer waits for the straggler before training starts
    plain, _ = run(knobs[:4], wl, step_s=1.0)
    assert plain.steps[1].train_start > step2[0] + 1.0


def test_fine_grain_overlap_modes_not_modelled_are_refused_by_name():
    with pytest.raises(ConfigError, match="fine_grain_overlap_granularity='micro_batch' is not modelled"):
        load_config(overrides=["policy=psrl", "policy.fine_grain_overlap_granularity=micro_batch"])
    with pytest.raises(ConfigError, match="fine_grain_overlap_scope='recompute'.*not modelled"):
        load_config(overrides=["policy=psrl", "policy.fine_grain_overlap_granularity=mini_batch",
                               "policy.ppo_mini_batch_size=2"])
    with pytest.raises(ConfigError, match="needs ppo_mini_batch_size"):
        load_config(overrides=["policy=psrl", "policy.fine_grain_overlap_granularity=mini_batch",
                               "policy.fine_grain_overlap_scope=pre_step"])
