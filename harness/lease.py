"""GPU leases keyed by UUID: exclusive records, a short mutex, an append-only history.

Layout under the state dir (``$RL_BENCH_STATE_DIR`` or ``~/.cache/rl-bench``)::

    leases/<GPU-UUID>.json        one live record per held GPU, created O_CREAT|O_EXCL
    leases/.mutex                 flock held only around acquire and release
    leases/released/<lease>.json  records moved here on release
    reservations.jsonl            acquire / refuse / release / force-release events

A multi-GPU acquire creates records in sorted-UUID order and, on any conflict, removes only
the records this attempt created. A record whose holder died keeps blocking: liveness is
reported (`holder_status`), never acted on; only `release(..., force=True)` breaks it, and that
is logged with the holder's status at the time.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import socket
import sys
import time
import uuid as uuidlib
from contextlib import contextmanager
from pathlib import Path

from harness.errors import BenchError, LeaseConflict
from harness.fsio import append_jsonl, fsync_dir, write_json

SCHEMA = "bench.lease.v1"


def default_state_dir() -> Path:
    return Path(os.environ.get("RL_BENCH_STATE_DIR") or Path.home() / ".cache" / "rl-bench")


def pid_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (/proc/<pid>/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields resume after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_status(record: dict) -> str:
    """alive | dead | pid-reused | other-host: a report for humans, never a reason to break a lease."""
    if record.get("host") != socket.gethostname():
        return "other-host"
    pid = int(record.get("pid", -1))
    if pid <= 0 or not pid_alive(pid):
        return "dead"
    if record.get("pid_start_time") is not None and pid_start_time(pid) != record["pid_start_time"]:
        return "pid-reused"
    return "alive"


class LeaseStore:
    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.leases = self.state_dir / "leases"
        self.released = self.leases / "released"
        self.history = self.state_dir / "reservations.jsonl"
        self.released.mkdir(parents=True, exist_ok=True)

    # -- internals -----------------------------------------------------------------------
    @contextmanager
    def _mutex(self):
        fd = os.open(self.leases / ".mutex", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _path(self, gpu_uuid: str) -> Path:
        if "/" in gpu_uuid or gpu_uuid.startswith("."):
            raise BenchError(f"refusing odd GPU UUID {gpu_uuid!r}")
        return self.leases / f"{gpu_uuid}.json"

    def _log(self, event: str, **fields) -> None:
        append_jsonl(self.history, {"event": event, "time_unix": time.time(), **fields})

    def _create(self, record: dict) -> bool:
        """Create one record exclusively; False if it already exists."""
        path = self._path(record["gpu_uuid"])
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(record, sort_keys=True, indent=1) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        fsync_dir(self.leases)
        return True

    # -- queries -------------------------------------------------------------------------
    def record(self, gpu_uuid: str) -> dict | None:
        try:
            return json.loads(self._path(gpu_uuid).read_text())
        except FileNotFoundError:
            return None
        except json.JSONDecodeError:
            # A record that exists but cannot be read still blocks; report it as such.
            return {"gpu_uuid": gpu_uuid, "lease_id": "?", "unreadable": True}

    def records(self) -> list[dict]:
        out = []
        for p in sorted(self.leases.glob("*.json")):
            rec = self.record(p.stem)
            if rec is not None:
                out.append(rec)
        return out

    def held_by(self, lease_id: str, uuids: list[str]) -> list[str]:
        """Problems (empty when every ``uuids`` record still names ``lease_id``)."""
        problems = []
        for u in uuids:
            rec = self.record(u)
            if rec is None:
                problems.append(f"{u}: no lease record")
            elif rec.get("lease_id") != lease_id:
                problems.append(f"{u}: held by lease {rec.get('lease_id')} (run {rec.get('run_id')})")
        return problems

    # -- acquire / release ---------------------------------------------------------------
    def acquire(self, gpus: list[dict], run_id: str, results_dir: str, argv: list[str] | None = None) -> dict:
        """Lease every GPU in ``gpus`` ({uuid, index}) or none; raise LeaseConflict naming holders."""
        lease_id = str(uuidlib.uuid4())
        uuids = sorted(g["uuid"] for g in gpus)
        index_of = {g["uuid"]: g.get("index") for g in gpus}
        pid = os.getpid()
        base = {
            "schema": SCHEMA,
            "lease_id": lease_id,
            "run_id": run_id,
            "all_gpu_uuids": uuids,
            "user": getpass.getuser(),
            "host": socket.gethostname(),
            "pid": pid,
            "pid_start_time": pid_start_time(pid),
            "container_id": os.environ.get("HOSTNAME") if Path("/.dockerenv").exists() else None,
            "argv": list(argv if argv is not None else sys.argv),
            "results_dir": str(results_dir),
            "created_at": time.time(),
        }
        created: list[str] = []
        with self._mutex():
            for u in uuids:
                rec = dict(base, gpu_uuid=u, gpu_index_at_acquire=index_of[u])
                if self._create(rec):
                    created.append(u)
                    continue
                holder = self.record(u) or {}
                for mine in created:  # roll back only this attempt's records
                    if (self.record(mine) or {}).get("lease_id") == lease_id:
                        self._path(mine).unlink()
                fsync_dir(self.leases)
                self._log("refuse", lease_id=lease_id, run_id=run_id, gpu_uuids=uuids, conflict=u,
                          holder_lease_id=holder.get("lease_id"), holder_run_id=holder.get("run_id"))
                raise LeaseConflict(
                    f"GPU {u} is leased by run {holder.get('run_id')} (lease {holder.get('lease_id')}, "
                    f"pid {holder.get('pid')} on {holder.get('host')}, holder {holder_status(holder)}); "
                    "nothing was reserved. Inspect it with `bench gpus`."
                )
            self._log("acquire", lease_id=lease_id, run_id=run_id, gpu_uuids=uuids, pid=pid, host=base["host"])
        return dict(base, gpu_uuids=uuids)

    def release(self, lease_id: str, force: bool = False, reason: str = "") -> list[str]:
        """Remove every record of ``lease_id``; returns the GPU UUIDs freed.

        Without ``force`` only the lease's own process may release it (the run's normal exit).
        """
        with self._mutex():
            mine = [r for r in self.records() if r.get("lease_id") == lease_id]
            if not mine:
                raise BenchError(f"no live lease {lease_id!r} (see `bench gpus`)")
            if not force and any(r.get("pid") != os.getpid() or r.get("host") != socket.gethostname()
                                 for r in mine):
                raise BenchError(f"lease {lease_id} belongs to another process; "
                                 "inspect its run, then use `bench release --lease-id ID --force`")
            status = {r["gpu_uuid"]: holder_status(r) for r in mine}
            write_json(self.released / f"{lease_id}.json",
                       {"records": mine, "released_at": time.time(), "forced": force, "reason": reason})
            for r in mine:
                self._path(r["gpu_uuid"]).unlink()
            fsync_dir(self.leases)
            self._log("force-release" if force else "release", lease_id=lease_id, run_id=mine[0].get("run_id"),
                      gpu_uuids=sorted(status), holder_status=status, by_pid=os.getpid(),
                      by_user=getpass.getuser(), reason=reason)
        return sorted(status)

    def note(self, lease_id: str, event: str, **fields) -> None:
        """Append an event about a held lease to the history (e.g. the run's evidence hashes)."""
        with self._mutex():
            self._log(event, lease_id=lease_id, **fields)

    def history_events(self) -> list[dict]:
        if not self.history.exists():
            return []
        return [json.loads(line) for line in self.history.read_text().splitlines() if line.strip()]
