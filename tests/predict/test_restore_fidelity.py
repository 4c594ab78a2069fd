"""Restoring the engine from a snapshot: with the true lengths (oracle) the restored engine
reproduces the original run's future; with draws, lengths respect what is known."""

from __future__ import annotations

import numpy as np
import pytest
from predict_helpers import full_run, small_cfg, snapshot_at
from simhelpers import linear_costs

from simrl.engine.restore import LengthSampler, draw_seed, restore
from simrl.predict import _run_until_batches
from workloads.types import build_workload, single_turn_group


def phase_times(full):
    s0, s1 = full.steps[0], full.steps[1]
    return {
        "waiting": s0.batch_ready * 0.5,
        "training": (s0.train_start + s0.train_end) / 2,
        "publishing": (s0.train_end + s0.publish_end) / 2,
        "waiting again": (s0.publish_end + s1.batch_ready) / 2,
    }


@pytest.mark.parametrize("policy", ["psrl", "verl"])
def test_oracle_restore_reproduces_the_future(policy):
    cfg = small_cfg(extra=[f"policy={policy}"] if policy != "psrl" else [])
    costs = linear_costs()
    full = full_run(cfg, costs)
    truth = [s.batch_ready for s in full.steps]
    finish = {(c.gid, c.tid, c.turn): c.finish for c in full.calls}
    checked = []
    for phase, t in phase_times(full).items():
        snap, _ = snapshot_at(cfg, t, costs)
        assert snap.trainer.phase == phase.split()[0], phase
        rs = restore(snap, costs=costs, oracle=True)
        got = _run_until_batches(rs, 2)
        want = [b for b in truth if b > snap.time_s][:2]
        # An iteration in progress restarts at the snapshot: at most one iteration late
        # (linear costs: a few ms per iteration at these batch sizes).
        assert np.allclose(got, want, atol=0.02), (phase, got, want)
        errs = [r.finish - finish[(r.group.gid, r.traj.tid, r.turn)] for r in rs.requests.values()
                if r.finish is not None and (r.group.gid, r.traj.tid, r.turn) in finish]
        assert len(errs) == len([r for r in rs.requests.values() if r.finish is not None])
        assert max((abs(e) for e in errs), default=0.0) < 0.02, phase
        checked.append(len(errs))
    assert sum(checked) > 0  # some snapshot held requests in flight


def test_a_training_step_in_progress_keeps_its_end(psrl_run):
    cfg, full = psrl_run
    s0 = full.steps[0]
    snap, _ = snapshot_at(cfg, s0.train_start + 2.5)
    # ConstantTraining(a=10): the step ends 10 s after it started, 7.5 s after the snapshot.
    assert snap.trainer.phase == "training"
    assert snap.trainer.phase_started_s == pytest.approx(s0.train_start)
    assert snap.trainer.phase_expected_s == pytest.approx(10.0)


def test_lengths_are_drawn_above_the_tokens_so_far():
    # Pool of first-call lengths 10, 20, 30, 40 (one group of 4).
    wl = build_workload("t", 0, [single_turn_group(0, 4, 100, [10, 20, 30, 40])])
    s = LengthSampler(wl, np.random.default_rng(0))
    draws = {s.draw(0, 25) for _ in range(200)}
    assert draws == {30, 40}  # uniform over the pool's values above 25
    assert s.draw(0, 40) == 41  # past the pool's tail: the call ends with its next token
    assert s.draw(0, 0) in {10, 20, 30, 40}


def test_group_draws_follow_the_siblings():
    # Two kinds of prompt: easy (lengths 10..40) and hard (lengths 1000..4000).
    groups = [single_turn_group(g, 4, 100, [10, 20, 30, 40] if g % 2 == 0 else [1000, 2000, 3000, 4000])
              for g in range(20)]
    s = LengthSampler(build_workload("t", 0, groups), np.random.default_rng(1))
    # A sibling already at 500 tokens: only hard groups explain it, so its sibling at 5 is long too.
    for _ in range(50):
        a, b = s.draw_group([500, 5], [])
        assert a in (1000, 2000, 3000, 4000) and b in (1000, 2000, 3000, 4000)
    # Finished siblings of 20 and 30 tokens: an easy prompt, so the one still running at 5 ends short.
    short = [s.draw_group([5], [20, 30])[0] for _ in range(50)]
    assert sum(x <= 40 for x in short) >= 45


def test_draws_are_seeded_and_distinct(psrl_run):
    cfg, full = psrl_run
    snap, _ = snapshot_at(cfg, full.steps[0].batch_ready * 0.5)
    costs = linear_costs()
    a = {rid: r.completion_tokens for rid, r in restore(snap, 3, costs=costs).requests.items()}
    b = {rid: r.completion_tokens for rid, r in restore(snap, 3, costs=costs).requests.items()}
    c = {rid: r.completion_tokens for rid, r in restore(snap, 4, costs=costs).requests.items()}
    assert a == b and a != c
    gen = {q.rid: q.generated_tokens for _, _, q in snap.requests()}
    assert all(a[rid] > gen[rid] for rid in a)
    assert draw_seed(0, 3) == draw_seed(0, 3) != draw_seed(0, 4)
