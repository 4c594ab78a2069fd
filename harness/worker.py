"""The worker entry point run inside a backend environment: ``python -m harness.worker --context F``.

It loads the run context written by the controller, runs the backend driver with an evidence
sink on the shared run directory, and writes ``outcome.json`` atomically. It holds no lease and
checks no GPUs; the controller does both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import backends
from harness.backends.base import EvidenceSink, RunContext
from harness.fsio import read_json, write_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.worker")
    ap.add_argument("--context", required=True)
    args = ap.parse_args(argv)
    ctx = RunContext.from_dict(read_json(Path(args.context)))
    driver = backends.load(ctx.backend, ctx.runtime)
    sink = EvidenceSink(Path(ctx.run_dir), log=lambda m: print(m, flush=True))
    try:
        outcome = driver.run(ctx, sink, lambda m: print(m, flush=True))
    finally:
        sink.close()
    write_json(Path(ctx.run_dir) / "outcome.json", outcome.to_dict())
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
