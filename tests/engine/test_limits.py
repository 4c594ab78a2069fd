"""The binding limit of each step, the trainer's wait by cause, the queue depth and the training
phases in the report (docs/model.md, "Binding limit of a step")."""

import pytest

from simrl.config import load_config
from simrl.engine.limits import LIMITS, LimitClock, binding_limit, closed_by
from simrl.engine.sim import simulate
from simrl.output import render_markdown
from simrl.policy.base import GroupRecord, PipelineState
from simrl.policy.builtin import BoundedAsyncPolicy, SyncPolicy

# A small, cheap run: linear rollout, constant training (a seconds) and fixed publication.
SMALL = ["cost.rollout=linear", "cost.weight_sync=fixed", "cost.weight_sync_knobs.publish_s=1", "workload.groups=8", "workload.group_size=2",
         "run.training_steps=3", "run.plots=false", "workload.knobs.completion_knots=[[0,20],[1,400]]"]


def run(policy, *extra):
    return simulate(load_config(None, [f"policy={policy}", "policy.batch_groups=2", *SMALL, *extra]))


class Clock:
    now = 0.0


def _group(gid):
    return GroupRecord(gid=gid, wg=gid, epoch=0, dispatch_time=0.0, dispatch_version=0, trajs=[])


def test_wait_split_by_idle_share_hand_derived():
    # 2 instances, trainer waits from t=0, admission closed by the version budget (sync policy,
    # nothing running: below the infinite concurrency cap). Both busy until t=4, then instance 0
    # idle until t=10: rollout = 4 + 6 * 1/2 = 7 s, staleness_bound = 6 * 1/2 = 3 s.
    env, st = Clock(), PipelineState(n_instances=2, instance_versions=[0, 0])
    c = LimitClock(env, st, SyncPolicy(batch_groups=2), 2)
    c.sample(0, 0, 1)
    c.sample(1, 1, 1)
    c.trainer(waiting=True)
    c.settled(paused=False)
    env.now = 4.0
    c.sample(0, 0, 0)
    env.now = 10.0
    assert c.snapshot() == pytest.approx({"rollout": 7.0, "staleness_bound": 3.0, "concurrency_cap": 0.0})
    # Not waiting: nothing more is counted (t 10..15); a drain pause counts as rollout (t 15..17).
    c.trainer(waiting=False, training_groups=2)
    env.now = 15.0
    c.trainer(waiting=True)
    c.settled(paused=True)
    env.now = 17.0
    assert c.snapshot() == pytest.approx({"rollout": 9.0, "staleness_bound": 3.0, "concurrency_cap": 0.0})


def test_closed_by_names_the_cap_or_the_budget():
    p = BoundedAsyncPolicy(batch_groups=2, max_staleness=1, max_concurrent_groups=2)
    st = PipelineState(n_instances=1, instance_versions=[0])
    assert closed_by(p, st) == "staleness_bound"  # 0 running < cap 2: the budget closed it
    st.running = {0: _group(0), 1: _group(1)}
    assert closed_by(p, st) == "concurrency_cap"


def test_binding_limit_is_the_largest_part_ties_in_order():
    assert binding_limit({"rollout": 1.0, "staleness_bound": 5.0, "concurrency_cap": 0.0}, 4.0, 2.0) == \
        "staleness_bound"
    assert binding_limit({"rollout": 3.0}, 3.0, 3.0) == "rollout"  # tie: LIMITS order
    assert binding_limit({"rollout": 0.0}, 1.0, 1.5) == "weight_sync"
    assert LIMITS[0] == "rollout"


@pytest.mark.parametrize(("extra", "expected"), [
    (["cost.training=constant", "cost.training_knobs.a=500", "cost.weight_sync_knobs.publish_s=0.1",
      ], "training"),
    (["cost.training=constant", "cost.training_knobs.a=0.1", "cost.weight_sync_knobs.publish_s=500",
      ], "weight_sync"),
])
def test_a_dominant_phase_binds_every_step(extra, expected):
    r = run("bounded_async", *extra)
    assert [s.binding_limit for s in r.steps] == [expected] * 3
    assert r.totals["binding_limit_steps"][expected] == 3


def test_wait_parts_sum_to_the_wait_and_the_sync_tail_is_the_staleness_bound():
    # Sync, 2 instances, batches of 2 groups x 2 trajectories: when the short trajectories finish,
    # an instance sits idle while the on-policy budget admits nothing: part of every wait is the
    # staleness bound (0).
    r = run("sync", "deployment.rollout.instances=2", "cost.training=constant", "cost.training_knobs.a=0.1",
            "cost.weight_sync_knobs.publish_s=0.1")
    for s in r.steps:
        assert sum(s.wait_s.values()) == pytest.approx(s.batch_ready - s.wait_start, abs=1e-9)
        assert s.binding_limit in LIMITS
    assert r.totals["trainer_wait_s"] == pytest.approx(sum(s.batch_ready - s.wait_start for s in r.steps))
    assert r.totals["trainer_wait_by_cause_s"]["staleness_bound"] > 0
    md = render_markdown(r)
    assert "| bound by |" in md and "## Queue and buffer depth" in md


def test_queue_depth_counts_groups_in_flight_buffered_and_training():
    r = run("sync", "cost.training=constant", "cost.training_knobs.a=1", "cost.weight_sync_knobs.publish_s=1")
    depth = r.queue_depth
    assert depth[0][0] == 0.0 and [d[0] for d in depth] == sorted(d[0] for d in depth)
    assert max(d[1] for d in depth) == 2  # sync admits one batch (2 groups) at a time
    assert max(d[3] for d in depth) == 2  # a step trains 2 groups
    for _t, _running, buffered, _training, by_version in depth:
        assert sum(by_version.values()) == buffered
    # While a batch trains (train_start..train_end of step 1) the depth says 2 groups are training.
    s = r.steps[0]
    during = [d for d in depth if s.batch_ready <= d[0] < s.train_end]
    assert during and all(d[3] == 2 for d in during)


def test_training_phases_are_reported_and_sum_to_the_training_time():
    r = run("sync", "cost.training_knobs.recompute_old_logprob=true")
    for s in r.steps:
        assert s.phases_s["old_log_prob"] > 0 and s.phases_s["actor_update"] > 0
        assert sum(s.phases_s.values()) == pytest.approx(s.train_end - s.train_start, rel=1e-6)
    total = r.totals["training_phases_s"]
    assert total["actor_update"] == pytest.approx(sum(s.phases_s["actor_update"] for s in r.steps))
    assert "## Training phases (s)" in render_markdown(r)
    # A model without phases reports none.
    r2 = run("sync", "cost.training=constant")
    assert all(s.phases_s == {} for s in r2.steps) and r2.totals["training_phases_s"] == {}
