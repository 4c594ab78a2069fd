"""What `bench gpus` shows: every GPU with its memory, compute processes and lease holder."""

from __future__ import annotations

from harness import nvsmi
from harness.lease import LeaseStore, holder_status


def inventory(store: LeaseStore) -> list[dict]:
    gpus = nvsmi.list_gpus()
    apps = nvsmi.compute_apps()
    rows = []
    for g in gpus:
        rec = store.record(g.uuid)
        rows.append({
            **g.to_dict(),
            "processes": [a.to_dict() for a in apps if a.gpu_uuid == g.uuid],
            "lease": None if rec is None else {
                "lease_id": rec.get("lease_id"), "run_id": rec.get("run_id"), "pid": rec.get("pid"),
                "host": rec.get("host"), "user": rec.get("user"), "results_dir": rec.get("results_dir"),
                "holder": "unreadable" if rec.get("unreadable") else holder_status(rec),
            },
        })
    # Records for GPUs nvidia-smi no longer lists still block; show them too.
    known = {g.uuid for g in gpus}
    for rec in store.records():
        if rec.get("gpu_uuid") not in known:
            rows.append({"index": None, "uuid": rec.get("gpu_uuid"), "name": "(not reported by nvidia-smi)",
                         "memory_used_mib": None, "memory_total_mib": None, "processes": [],
                         "lease": {"lease_id": rec.get("lease_id"), "run_id": rec.get("run_id"),
                                   "pid": rec.get("pid"), "host": rec.get("host"),
                                   "holder": holder_status(rec)}})
    return rows
