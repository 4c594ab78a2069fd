"""Speed of the workloads package on 100,000-group traces: rl_math and multi_turn side by side.

Prints the best-of-N wall time to generate, to validate (`Workload.problems`), to hash
(`schedule_sha256`), to write a trace and to read it back (parse + validate), and the trace
size. Figures, not assertions: the machines are noisy.

    .venv/bin/python benchmarks/workloads.py [--groups 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

from workloads.registry import generate  # noqa: E402
from workloads.trace import read_trace, write_trace  # noqa: E402

WORKLOADS = ("rl_math", "multi_turn")


def best_of(repeat: int, fn):
    """(best wall seconds, last result) over ``repeat`` calls."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def measure(name: str, groups: int, repeat: int, folder: Path) -> dict:
    gen_s, w = best_of(repeat, lambda: generate(name, groups, seed=0))
    val_s, problems = best_of(repeat, w.problems)
    assert problems == [], problems
    sha_s, sha = best_of(repeat, w.schedule_sha256)
    path = folder / f"{name}.jsonl"
    write_s, _ = best_of(repeat, lambda: write_trace(w, path))
    read_s, back = best_of(repeat, lambda: read_trace(path))
    assert back.schedule_sha256() == sha
    return {
        "groups": w.n_groups,
        "trajectories": w.n_trajectories,
        "calls": w.n_calls,
        "generate_s": gen_s,
        "validate_s": val_s,
        "sha256_s": sha_s,
        "write_s": write_s,
        "read_s": read_s,
        "trace_MB": path.stat().st_size / 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        rows = {name: measure(name, args.groups, args.repeat, Path(d)) for name in WORKLOADS}
    print(f"{'':<14}" + "".join(f"{n:>14}" for n in WORKLOADS))
    for key in next(iter(rows.values())):
        cells = []
        for name in WORKLOADS:
            v = rows[name][key]
            cells.append(f"{v:>14,d}" if isinstance(v, int) else f"{v:>14.3f}")
        print(f"{key:<14}" + "".join(cells))
    print(f"(best of {args.repeat}; {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
