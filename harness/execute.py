"""Launching a backend driver in one of three runtimes and collecting its outcome.

``sim`` calls the driver in process; ``native`` starts ``python -m harness.worker`` with the
user's backend interpreter; ``container`` starts the same worker in the recipe image. The worker
runs in its own process group (``start_new_session``); its pid and group are handed to
``on_start`` before anything else happens, so the manifest names them, and any way out of
`execute` other than the worker's own exit (Ctrl-C, SIGTERM, an error) kills the whole group,
and for a container also the named container. Worker output is appended to run.log, so a
traceback anywhere invalidates the run. GPUs are exported as UUIDs, never as indices.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from harness import backends, recipes
from harness.backends.base import BackendOutcome, EvidenceSink, RunContext
from harness.fsio import read_json, write_json

KILL_GRACE_S = 10.0


def container_name(run_id: str) -> str:
    return f"bench-{run_id}"


def execute(ctx: RunContext, log, image: str | None = None, on_start=None) -> BackendOutcome:
    run_dir = Path(ctx.run_dir)
    write_json(run_dir / "context.json", ctx.to_dict())
    if ctx.runtime == "sim":
        driver = backends.load(ctx.backend, "sim")
        sink = EvidenceSink(run_dir, log, run_id=ctx.run_id, lease_id=ctx.lease_id, durable=False)  # bulk write
        try:
            return driver.run(ctx, sink, log)
        finally:
            sink.close()
    uuids = ctx.trainer_uuids + ctx.inference_uuids
    if ctx.runtime == "native":
        cmd = [ctx.python, "-m", "harness.worker", "--context", str(run_dir / "context.json")]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(uuids), CUDA_DEVICE_ORDER="PCI_BUS_ID",
                   PYTHONPATH=str(recipes.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if ctx.hf_cache:
            env["HF_HOME"] = ctx.hf_cache
        if ctx.skyrl_cuda_compat:
            env["SKYRL_USE_CUDA_COMPAT"] = "1"
    else:
        cmd = recipes.container_run_command(image or recipes.image_tag(ctx.backend), uuids, run_dir,
                                            ctx.hf_cache, ctx.skyrl_cuda_compat, name=container_name(ctx.run_id))
        env = dict(os.environ)
    log.info("launch: " + " ".join(cmd))
    with open(run_dir / "run.log", "a", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        info = {"pid": proc.pid, "pgid": proc.pid, "started_unix": time.time(), "cmd": cmd,
                "container": container_name(ctx.run_id) if ctx.runtime == "container" else None}
        try:  # from here on, any way out but the worker's own exit stops its whole group
            if on_start:
                on_start(info)
            rc = proc.wait()
        except BaseException:
            stop_worker(proc, info, log)
            raise
    path = run_dir / "outcome.json"
    if path.exists():
        data = read_json(path)
        data["exit_code"] = rc if rc else data.get("exit_code", 0)
        data["notes"] = tuple(data.get("notes", ()))
        return BackendOutcome(**data)
    return BackendOutcome(exit_code=rc or 1, native_config={}, backend_version="unknown",
                          notes=("worker wrote no outcome.json",))


def stop_worker(proc: subprocess.Popen, info: dict, log) -> None:
    """SIGTERM the worker's process group, SIGKILL it after a grace period; stop its container."""
    if info.get("container"):
        subprocess.run(["docker", "kill", info["container"]], capture_output=True, check=False, timeout=60)
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(info["pgid"], sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            if not group_alive(info["pgid"]):
                break
        except subprocess.TimeoutExpired:
            continue
    log.error(f"worker pid {info['pid']} (process group {info['pgid']}) stopped")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
