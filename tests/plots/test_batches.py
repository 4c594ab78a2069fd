"""simrl.plots.batches: the batch-assembly series, per-step straggler wait, and its plot."""

import pytest

from simrl.plots.batches import SERIES, assembly_rows, batch_series, step_rows, write_assembly


def _run():
    # Five groups, batches of 2. g0 (dispatched 0, done 10) and g1 (0, 2) are step 1's batch,
    # taken at 10; g2 (0, 3) and g3 (5, 6) step 2's, taken at 12; g4 (0, 4) is accepted and
    # evicted from the buffer at 8 (buffer_drop), never trained.
    ev = [{"t": 0.0, "kind": "group_dispatch", "gid": g} for g in (0, 1, 2, 4)]
    ev += [{"t": 2.0, "kind": "group_done", "gid": 1, "verdict": "accept"},
           {"t": 3.0, "kind": "group_done", "gid": 2, "verdict": "accept"},
           {"t": 4.0, "kind": "group_done", "gid": 4, "verdict": "accept"},
           {"t": 5.0, "kind": "group_dispatch", "gid": 3},
           {"t": 6.0, "kind": "group_done", "gid": 3, "verdict": "accept"},
           {"t": 8.0, "kind": "buffer_drop", "gid": 4, "by": "policy"},
           {"t": 10.0, "kind": "group_done", "gid": 0, "verdict": "accept"}]
    steps = [{"step": 1, "gids": [0, 1], "wait_start": 0.0, "batch_ready": 10.0, "train_start": 10.0,
              "train_end": 11.0, "publish_end": 12.0, "staleness": [0, 0], "binding_limit": "rollout"},
             {"step": 2, "gids": [2, 3], "wait_start": 12.0, "batch_ready": 12.0, "train_start": 12.0,
              "train_end": 13.0, "publish_end": 14.0, "staleness": [1, 0], "binding_limit": "training"}]
    return {"steps": steps, "totals": {"makespan_s": 14.0}}, ev


def test_series_splits_groups_by_the_batch_that_trains_them():
    rep, ev = _run()
    # (t, next batch generating, next batch finished, finished for a later batch):
    # t=0: g0, g1 (step 1) generating. t=2: g1 done. t=3: g2 done, for step 2 (later).
    # t=4: g4 done, never trained (later). t=6: g3 done (later: 3). t=8: g4 evicted (2).
    # t=10: step 1 taken; the next batch is step 2, both finished. t=12: step 2 taken: nothing.
    assert batch_series(rep, ev) == [(0.0, 2, 0, 0), (2.0, 1, 1, 0), (3.0, 1, 1, 1), (4.0, 1, 1, 2),
                                     (6.0, 1, 1, 3), (8.0, 1, 1, 2), (10.0, 0, 2, 0), (12.0, 0, 0, 0)]


def test_straggler_wait_is_the_wait_with_a_full_batch_queued():
    rep, ev = _run()
    rows = step_rows(rep, ev, batch_groups=2)
    # Step 1 waits 0..10; from t=3 two finished groups (g1, g2) are queued: straggler wait 10 - 3 = 7 s.
    # Its slowest group is g0 (dispatched 0, done 10); at the take g2 and g3 are queued for step 2
    # (g4 was evicted at 8).
    r1, r2 = rows
    assert r1["wait_s"] == 10.0 and r1["straggler_wait_s"] == pytest.approx(7.0)
    assert (r1["slowest_dispatch"], r1["slowest_done"], r1["slowest_latency_s"]) == (0.0, 10.0, 10.0)
    assert r1["later_queued_at_ready"] == 2 and r1["queued_at_ready"] == 4  # g0, g1 (its batch) + g2, g3
    assert r2["wait_s"] == 0.0 and r2["straggler_wait_s"] == 0.0 and r2["later_queued_at_ready"] == 0
    # a batch of 4 is queued in full only while g4 is still buffered, 6..8 (g1, g2, g3, g4): 2 s;
    # a batch of 5 never is
    assert step_rows(rep, ev, batch_groups=4)[0]["straggler_wait_s"] == pytest.approx(2.0)
    assert step_rows(rep, ev, batch_groups=5)[0]["straggler_wait_s"] == 0.0


def test_a_trained_group_without_a_dispatch_event_is_refused():
    rep, ev = _run()
    ev = [e for e in ev if not (e["kind"] == "group_dispatch" and e["gid"] == 3)]
    with pytest.raises(ValueError, match="group 3.*telemetry"):
        batch_series(rep, ev)


def test_plot_rows_and_files_are_deterministic(tmp_path):
    pytest.importorskip("vl_convert")
    rep, ev = _run()
    rows, waits = assembly_rows(rep, ev, "r")
    assert {r["series"] for r in rows} == set(SERIES)
    # the dashed whole-queue series is the finished sum: at t=6, 1 + 3 = 4
    assert {"run": "r", "t": 6.0, "v": 4, "series": SERIES[3]} in rows
    assert waits == [{"run": "r", "a": 0.0, "b": 10.0, "what": "trainer waiting for its batch"}]
    a = write_assembly(tmp_path / "a", "x", [("one", rows, waits)], "t", png=False)
    b = write_assembly(tmp_path / "b", "x", [("one", rows, waits)], "t", png=False)
    assert [p.name for p in a] == ["x.html"]
    assert a[0].read_bytes() == b[0].read_bytes()
