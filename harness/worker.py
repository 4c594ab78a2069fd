"""The worker entry point run inside a backend environment: ``python -m harness.worker --context F``.

It loads the run context written by the controller, runs the backend driver with an evidence
sink on the shared run directory (every line stamped with the run and lease ids), and writes
``outcome.json`` atomically. It holds no lease and checks no GPUs; the controller does both.
The controller starts it as the leader of its own process group; should the controller die
without stopping it (SIGKILL), a watchdog notices the new parent and kills the whole group,
so no backend process outlives the run that leased its GPUs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from harness import backends
from harness.backends.base import EvidenceSink, RunContext
from harness.fsio import read_json, write_json


def _watch_parent(parent: int, interval_s: float = 1.0) -> None:
    while True:
        time.sleep(interval_s)
        if os.getppid() != parent:
            print(f"controller (pid {parent}) is gone; stopping the worker's process group", flush=True)
            os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.worker")
    ap.add_argument("--context", required=True)
    args = ap.parse_args(argv)
    if os.getpgrp() == os.getpid():  # started by the controller as a group leader
        threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    ctx = RunContext.from_dict(read_json(Path(args.context)))
    driver = backends.load(ctx.backend, ctx.runtime)
    sink = EvidenceSink(Path(ctx.run_dir), log=lambda m: print(m, flush=True), run_id=ctx.run_id,
                        lease_id=ctx.lease_id)
    try:
        outcome = driver.run(ctx, sink, lambda m: print(m, flush=True))
    finally:
        sink.close()
    write_json(Path(ctx.run_dir) / "outcome.json", outcome.to_dict())
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
