"""Scan many random seeds of the differential generator: SimPy vs the fast path, compared exactly.

    .venv/bin/python tests/fast/diffscan.py --seeds 0:1000 [--batch 200] [--rel 0] [--kv-policy any] [--prefix any] [--crossing any] [--router any]

Each seed draws `diffcases.random_case(np.random.default_rng(seed), 8, 4, 3, prefix=...)` (the shape of
tests/fast/test_hypothesis_differential.py), runs SimPy, then the fast path in vmapped batches
with one Static, and compares per step and per call with `diffcases.compare` at relative
tolerance ``--rel`` (0: times equal, not close). Prints the mismatching seeds and the count.
Not collected by pytest (no test_ prefix): a tool for long scans.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: simhelpers
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/fast: diffcases

import numpy as np  # noqa: E402
from diffcases import compare, random_case, run_compared  # noqa: E402

GROUPS, N, STEPS = 8, 4, 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0:1000", help="start:stop (a range) or a comma-separated list")
    ap.add_argument("--batch", type=int, default=250, help="configurations per fast-path batch")
    ap.add_argument("--rel", type=float, default=0.0, help="relative tolerance on times (0: exact)")
    ap.add_argument("--kv-policy", default="reserve", choices=["reserve", "on_demand", "any"],
                    help="KV policy of the drawn configurations (random_case's kv_policy)")
    ap.add_argument("--prefix", default="any", choices=["off", "on", "any"],
                    help="prefix caching over group-shared prompts (random_case's prefix draw)")
    ap.add_argument("--perinst", default="any", choices=["off", "any"],
                    help="any: a third of the cases are psrl with per-instance pulls (random_case's perinst draw)")
    ap.add_argument("--crossing", default="off", choices=["off", "on", "any"],
                    help="groups failed at a publication (random_case's crossing draw: dressage or a record with "
                         "fail_on_version_crossing)")
    ap.add_argument("--router", default="any", choices=["two", "any"],
                    help="two: least_requests or round_robin without a cap; any: random_case's router draw after "
                         "everything else (dp_shard too, half the time a router.active_cap)")
    args = ap.parse_args(argv)
    if ":" in args.seeds:
        lo, hi = (int(x) for x in args.seeds.split(":"))
        seeds = list(range(lo, hi))
    else:
        seeds = [int(x) for x in args.seeds.split(",")]

    from simrl_fast import lower
    from simrl_fast.lowering import static_for

    bad: list[tuple[int, str]] = []
    inexact = 0  # seeds that match to 1e-9 but not exactly (only counted when --rel is 0)
    t0 = time.time()
    for b0 in range(0, len(seeds), args.batch):
        chunk = seeds[b0:b0 + args.batch]
        cases, ps, was = [], [], []
        for s in chunk:
            case = random_case(np.random.default_rng(s), GROUPS, N, STEPS, kv_policy=args.kv_policy,
                               prefix=args.prefix, perinst=args.perinst == "any", crossing=args.crossing,
                               router=args.router)
            case.run_simpy()
            _, p, wa = lower(case.cfg, case.workload, case.costs)
            cases.append(case)
            ps.append(p)
            was.append(wa)
        need = static_for(ps, was[0])
        mg = max(need.max_groups, 48)
        fixed = static_for([p._replace(n_inst=np.int32(4), max_seqs=np.int32(64), batch=np.int32(4),
                                       pc=np.int32(args.prefix != "off")) for p in ps], was[0], mg)
        res, differ = run_compared(cases, ps, was, fixed, rel=args.rel, stops=False)
        for m, _ in differ:
            try:
                compare(cases[m], res, m, rel=1e-9)
                inexact += 1
            except AssertionError as exc2:
                bad.append((chunk[m], str(exc2).splitlines()[0][:300]))
        print(f"{b0 + len(chunk)} seeds, {len(bad)} mismatches, {inexact} equal only to 1e-9, "
              f"{time.time() - t0:.0f} s", flush=True)
    for s, why in bad:
        print(f"seed {s}: {why}")
    print(f"mismatches: {len(bad)} of {len(seeds)} seeds; {inexact} more match to 1e-9 but not at rel={args.rel:g}")
    return 1 if bad or inexact else 0


if __name__ == "__main__":
    sys.exit(main())
