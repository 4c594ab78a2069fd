"""A fake nvidia-smi driven by the JSON fixture named in $FAKE_NVIDIA_SMI_STATE.

Fixture: {"driver_version", "gpus": [{index, uuid, name, pci_bus_id, memory_total, memory_used}],
"processes": [{gpu_uuid, pid, process_name, used_memory}], "exit_code", "message",
"no_process_message"}. Implements -L, --query-gpu, --query-compute-apps, --format with csv /
noheader / nounits in any order, -i/--id by index, UUID or PCI id; unknown fields exit 2.
$FAKE_NVIDIA_SMI_DELAY_S (optional): seconds every call takes before answering (a slow driver; a test that
signals a run while it holds its lease widens that window with it).
"""

from __future__ import annotations

import json
import os
import sys

GPU_FIELDS = {
    "index": ("index", None), "uuid": ("uuid", None), "name": ("name", None),
    "pci.bus_id": ("pci_bus_id", None), "memory.total": ("memory_total", "MiB"),
    "memory.used": ("memory_used", "MiB"), "driver_version": ("driver_version", None),
    "utilization.gpu": ("utilization", "%"),
}
APP_FIELDS = {
    "gpu_uuid": ("gpu_uuid", None), "pid": ("pid", None), "process_name": ("process_name", None),
    "used_memory": ("used_memory", "MiB"), "used_gpu_memory": ("used_memory", "MiB"),
    "gpu_name": ("gpu_name", None), "gpu_bus_id": ("gpu_bus_id", None),
}


def fail(code: int, msg: str) -> None:
    print(msg)
    sys.exit(code)


def parse(argv: list[str]) -> dict:
    opts = {"list": False, "query": None, "kind": None, "format": None, "id": None}
    it = iter(argv)
    for a in it:
        if a == "-L" or a == "--list-gpus":
            opts["list"] = True
        elif a.startswith(("--query-gpu", "--query-compute-apps")):
            kind, _, fields = a.partition("=")
            opts["kind"] = kind[len("--query-"):]
            opts["query"] = fields or next(it, "")
        elif a.startswith("--format"):
            opts["format"] = a.partition("=")[2] or next(it, "")
        elif a in ("-i", "--id"):
            opts["id"] = next(it, None)
        elif a.startswith("--id="):
            opts["id"] = a.partition("=")[2]
        else:
            fail(2, f'Invalid combination of input arguments. Unknown option "{a}".')
    return opts


def select(gpus: list[dict], ident: str | None) -> list[dict]:
    if ident is None:
        return gpus
    hit = [g for g in gpus if ident in (str(g["index"]), g["uuid"], g.get("pci_bus_id"))]
    if not hit:
        fail(6, f"No devices were found matching {ident}")
    return hit


def fmt(value, unit, nounits: bool) -> str:
    if value is None:
        return "[N/A]"
    if isinstance(value, str) and value.startswith("["):
        return value
    return f"{value}" if nounits or unit is None else f"{value} {unit}"


def main(argv: list[str]) -> None:
    delay = float(os.environ.get("FAKE_NVIDIA_SMI_DELAY_S") or 0)
    if delay > 0:
        import time

        time.sleep(delay)
    state = json.load(open(os.environ["FAKE_NVIDIA_SMI_STATE"]))
    if state.get("exit_code"):
        fail(int(state["exit_code"]), state.get("message", "NVIDIA-SMI has failed"))
    opts = parse(argv)
    gpus = select(sorted(state.get("gpus", []), key=lambda g: g["index"]), opts["id"])
    driver = state.get("driver_version", "570.124.06")
    if opts["list"]:
        for g in gpus:
            print(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        return
    if not opts["kind"] or opts["format"] is None:
        fail(2, "Invalid combination of input arguments.")
    fmt_opts = {f.strip() for f in opts["format"].split(",") if f.strip()}
    if "csv" not in fmt_opts or fmt_opts - {"csv", "noheader", "nounits"}:
        fail(2, f'"{opts["format"]}" is not a valid format.')
    nounits, header = "nounits" in fmt_opts, "noheader" not in fmt_opts
    table = GPU_FIELDS if opts["kind"] == "gpu" else APP_FIELDS
    fields = [f.strip() for f in opts["query"].split(",") if f.strip()]
    for f in fields:
        if f not in table:
            fail(2, f'Field "{f}" is not a valid field to query.')
    if opts["kind"] == "gpu":
        rows = [dict(g, driver_version=driver) for g in gpus]
    else:
        uuids = {g["uuid"]: g for g in gpus}
        rows = [dict(p, gpu_name=uuids[p["gpu_uuid"]]["name"], gpu_bus_id=uuids[p["gpu_uuid"]].get("pci_bus_id"))
                for p in state.get("processes", []) if p["gpu_uuid"] in uuids]
    if header:
        print(", ".join(f if table[f][1] is None or nounits else f"{f} [{table[f][1]}]" for f in fields))
    if not rows and opts["kind"] == "compute-apps" and state.get("no_process_message"):
        print("No running processes found")
    for r in rows:
        print(", ".join(fmt(r.get(table[f][0]), table[f][1], nounits) for f in fields))


if __name__ == "__main__":
    main(sys.argv[1:])
