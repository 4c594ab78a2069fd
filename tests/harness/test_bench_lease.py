"""Leases: exclusive per-GPU records, all-or-nothing acquire, no stale override, forced release."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

from harness.errors import BenchError, LeaseConflict
from harness.lease import LeaseStore, holder_status


def gpus(*ids):
    return [{"uuid": f"GPU-{i}", "index": i} for i in ids]


def _contend(state_dir, ids, barrier, results):
    store = LeaseStore(state_dir)
    barrier.wait()
    try:
        lease = store.acquire(gpus(*ids), run_id=f"run-{os.getpid()}", results_dir="/r", argv=[])
        results.put((tuple(ids), lease["lease_id"]))
    except LeaseConflict:
        results.put((tuple(ids), None))


def test_concurrent_acquirers_exactly_one_holder_per_gpu(tmp_path):
    sets = [(0, 1, 2, 3)] * 8 + [(2, 3, 4, 5)] * 8 + [(4, 5, 6, 7)] * 8
    ctx = mp.get_context("spawn")  # never fork: JAX may be loaded in the test process
    barrier, results = ctx.Barrier(len(sets)), ctx.Queue()
    procs = [ctx.Process(target=_contend, args=(tmp_path, ids, barrier, results)) for ids in sets]
    for p in procs:
        p.start()
    got = [results.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    winners = [(ids, lid) for ids, lid in got if lid]
    assert winners
    held = [g for ids, _ in winners for g in ids]
    assert len(held) == len(set(held)), "a GPU was leased twice"
    store = LeaseStore(tmp_path)
    recs = {r["gpu_uuid"]: r["lease_id"] for r in store.records()}
    # exactly the winners' GPUs are held, each by its winner: losers left no partial records
    assert recs == {f"GPU-{g}": lid for ids, lid in winners for g in ids}
    events = [e["event"] for e in store.history_events()]
    assert events.count("acquire") == len(winners) and events.count("refuse") == len(sets) - len(winners)


def test_overlapping_lease_rejected_and_rolled_back(tmp_path):
    store = LeaseStore(tmp_path)
    first = store.acquire(gpus(2, 3, 4, 5), "a", "/r", [])
    with pytest.raises(LeaseConflict, match="leased by run a"):
        store.acquire(gpus(0, 1, 2, 3), "b", "/r", [])
    assert {r["gpu_uuid"] for r in store.records()} == {f"GPU-{i}" for i in (2, 3, 4, 5)}
    store.acquire(gpus(0, 1, 6, 7), "c", "/r", [])  # disjoint sets still work
    store.release(first["lease_id"])
    assert {r["run_id"] for r in store.records()} == {"c"}


def _hold_and_die(state_dir, q):
    lease = LeaseStore(state_dir).acquire(gpus(0, 1, 2, 3), "killed-run", "/r", [])
    q.put(lease["lease_id"])
    time.sleep(60)


def test_killed_supervisor_blocks_until_forced_release(tmp_path):
    ctx = mp.get_context("spawn")  # never fork: JAX may be loaded in the test process
    q = ctx.Queue()
    p = ctx.Process(target=_hold_and_die, args=(tmp_path, q))
    p.start()
    lease_id = q.get(timeout=20)
    store = LeaseStore(tmp_path)
    assert holder_status(store.record("GPU-0")) == "alive"
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    rec = store.record("GPU-0")
    assert holder_status(rec) == "dead"
    with pytest.raises(LeaseConflict):  # no automatic stale override
        store.acquire(gpus(0, 1, 2, 3), "next", "/r", [])
    with pytest.raises(BenchError, match="another process"):
        store.release(lease_id)
    assert store.release(lease_id, force=True, reason="holder dead") == [f"GPU-{i}" for i in range(4)]
    ev = store.history_events()[-1]
    assert ev["event"] == "force-release" and ev["holder_status"]["GPU-0"] == "dead"
    assert (store.released / f"{lease_id}.json").exists()
    store.acquire(gpus(0, 1, 2, 3), "next", "/r", [])


def test_record_fields_and_liveness(tmp_path):
    store = LeaseStore(tmp_path)
    lease = store.acquire(gpus(3, 1, 0, 2), "r1", "/res", ["bench", "run"])
    rec = store.record("GPU-1")
    for key in ("lease_id", "run_id", "gpu_uuid", "gpu_index_at_acquire", "all_gpu_uuids", "user", "host",
                "pid", "pid_start_time", "argv", "results_dir", "created_at", "schema"):
        assert key in rec
    assert rec["all_gpu_uuids"] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"] and rec["gpu_index_at_acquire"] == 1
    assert holder_status(rec) == "alive"
    assert holder_status(dict(rec, pid_start_time=rec["pid_start_time"] + 1)) == "pid-reused"
    assert holder_status(dict(rec, host="elsewhere")) == "other-host"
    assert store.held_by(lease["lease_id"], ["GPU-0", "GPU-9"]) == ["GPU-9: no lease record"]
