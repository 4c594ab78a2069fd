"""Two versions of the fast path side by side in one process: CPU time per configuration, same results.

The base version's ``simrl_fast`` package (``--base``, a git revision; default ``HEAD``) is extracted with
``git archive`` into a temporary directory as a package named ``simrl_fast_base`` (its imports renamed), and
imported next to the working tree's ``simrl_fast``. Both lower the first ``--m`` points of the
`benchmarks/fast.py` grid (each with its own `simrl_fast.grid.lower_grid`), compile once (not timed), then
run ``run_params(chunk=M)`` alternately ``--reps`` times each. Printed per run: wall time, CPU time of the
process per configuration (the steadier figure on a shared machine: other jobs' load slows the wall clock
more than this process's CPU time) and scan steps per configuration; then the median CPU ms per
configuration of each, their ratio, the load average, and whether every result field is identical
(NaN equal to NaN).

    .venv/bin/python benchmarks/fast_ab.py [--base REV] [--m 1000] [--reps 3]
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def extract_base(rev: str, into: Path) -> str:
    """``simrl_fast`` at ``rev`` as the package ``simrl_fast_base`` under ``into``; returns the commit id."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "simrl_fast"], check=True,
                          capture_output=True).stdout
    dest = into / "simrl_fast_base"
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.endswith(".py"):
                continue
            text = tar.extractfile(member).read().decode()
            text = re.sub(r"\bsimrl_fast\b", "simrl_fast_base", text)
            (dest / Path(member.name).name).write_text(text)
    return commit


def same(a, b) -> list[str]:
    """Names of the result fields that differ (NaN equal to NaN)."""
    bad = []
    for f in a._fields:
        x, y = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            bad.append(f)
    return bad


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="HEAD", help="git revision of the base simrl_fast (default HEAD)")
    ap.add_argument("--m", type=int, default=1000, help="configurations (the first M points of benchmarks/fast.py's grid)")
    ap.add_argument("--reps", type=int, default=3, help="measured runs of each version, alternating")
    args = ap.parse_args(argv)

    import fast as bench

    from simrl.config import load_config
    from simrl.engine.sim import load_workload

    tmp = tempfile.TemporaryDirectory()
    commit = extract_base(args.base, Path(tmp.name))
    sys.path.insert(0, tmp.name)
    cols = bench.grid(np.random.default_rng(0), args.m)
    workload = load_workload(load_config(overrides=bench.BASE))
    variants = {}
    for name, pkg in (("base " + commit[:9], "simrl_fast_base"), ("work tree", "simrl_fast")):
        importlib.import_module(pkg)  # (caps XLA's ISA before jax starts, as simrl_fast does)
        grid, engine = importlib.import_module(pkg + ".grid"), importlib.import_module(pkg + ".engine")
        static, params, wa = grid.lower_grid(workload, bench.BASE_COSTS, cols, base=bench.BASE)
        variants[name] = (engine, static, params, wa)
    results, cpu, rows = {}, {n: [] for n in variants}, []
    for name, (engine, static, params, wa) in variants.items():  # compile (and a first run): not timed
        t0 = time.perf_counter()
        results[name] = engine.run_params(params, wa, chunk=args.m, static=static)
        print(f"{name}: compile + first run {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"{'version':>18} {'rep':>3} {'wall s':>8} {'CPU ms/config':>13} {'steps/config':>12} {'load avg':>8}")
    for rep in range(args.reps):
        for name, (engine, static, params, wa) in variants.items():
            t0, c0 = time.perf_counter(), time.process_time()
            res = engine.run_params(params, wa, chunk=args.m, static=static)
            wall, c = time.perf_counter() - t0, time.process_time() - c0
            cpu[name].append(c / args.m * 1e3)
            print(f"{name:>18} {rep:>3} {wall:>8.2f} {cpu[name][-1]:>13.2f} {res.actions.mean():>12.0f} "
                  f"{os.getloadavg()[0]:>8.1f}", flush=True)
            rows.append((name, res))
    names = list(variants)
    med = {n: statistics.median(cpu[n]) for n in names}
    diff = same(results[names[0]], results[names[1]])
    print(f"M = {args.m}: median CPU ms per configuration: " + ", ".join(f"{n} {med[n]:.2f}" for n in names)
          + f"; {names[0]} / {names[1]} = {med[names[0]] / med[names[1]]:.2f}x")
    print("results: " + ("identical, every field" if not diff else "DIFFER in " + ", ".join(diff)))
    tmp.cleanup()


if __name__ == "__main__":
    main()
