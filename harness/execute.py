"""Launching a backend driver in one of three runtimes and collecting its outcome.

``sim`` calls the driver in process; ``native`` starts ``python -m harness.worker`` with the
user's backend interpreter; ``container`` starts the same worker in the recipe image. Worker
output is appended to run.log, so a traceback anywhere invalidates the run. The GPUs are
exported as UUIDs (``CUDA_VISIBLE_DEVICES``), never as indices.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness import backends, recipes
from harness.backends.base import BackendOutcome, EvidenceSink, RunContext
from harness.fsio import read_json, write_json


def execute(ctx: RunContext, log, image: str | None = None) -> BackendOutcome:
    run_dir = Path(ctx.run_dir)
    write_json(run_dir / "context.json", ctx.to_dict())
    if ctx.runtime == "sim":
        driver = backends.load(ctx.backend, "sim")
        sink = EvidenceSink(run_dir, log)
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
                                            ctx.hf_cache, ctx.skyrl_cuda_compat)
        env = dict(os.environ)
    log.info("launch: " + " ".join(cmd))
    with open(run_dir / "run.log", "a", encoding="utf-8") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False).returncode
    path = run_dir / "outcome.json"
    if path.exists():
        data = read_json(path)
        data["exit_code"] = rc if rc else data.get("exit_code", 0)
        data["notes"] = tuple(data.get("notes", ()))
        return BackendOutcome(**data)
    return BackendOutcome(exit_code=rc or 1, native_config={}, backend_version="unknown",
                          notes=("worker wrote no outcome.json",))
