"""Where a scan step of the fast path spends its time, by source line: an XLA profile mapped back to the code.

Runs the first ``--m`` points of the `benchmarks/fast.py` grid for ``--warm`` scan chunks (32 steps each),
then traces ``--chunks`` more with `jax.profiler` and sums the kernel times of the trace by fused kernel.
Each kernel is mapped through the compiled program's metadata (its stack frames) to the innermost line of
``simrl_fast`` that produced it, and to its family (the function of the step it belongs to:
`instance.instance_action`, `step.route_all`, `step.select`, the trainer's `rare_action`, ...). Prints the
CPU time per step and configuration of the untraced chunks, the shares by family, by line and the largest
kernels with their shapes, and every `copy` of an ``[M, ...]`` array in the compiled program (one of a
carried array inside the loop body is a scatter XLA could not do in place; docs/fastpath.md, "In-place
updates"). Shares only: on a loaded machine the absolute kernel times are noise.

    .venv/bin/python benchmarks/fast_profile.py [--m 1000] [--warm 16] [--chunks 2] [--top 30]
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

FAMILIES = ("rare_action", "local_phase", "instance_action", "route_all", "dispatch_action", "select", "prepare",
            "main_action", "_scatter", "_gather")


def frame_table(txt: str):
    """stack_frame_id -> [(file, function, line), ...] innermost first, from an HLO module's text."""
    def section(name):
        m = re.search(r"^" + name + r"\n(.*?)\n\n", txt, re.S | re.M)
        return m.group(1).splitlines() if m else []

    def fields(line):
        k, rest = line.split(" ", 1)
        return int(k), rest

    files = {k: v.strip('"').split("/")[-1] for k, v in map(fields, section("FileNames"))}
    funcs = {k: v.strip('"') for k, v in map(fields, section("FunctionNames"))}
    locs, frames = {}, {}
    for k, rest in map(fields, section("FileLocations")):
        d = dict(re.findall(r"(\w+)=(\d+)", rest))
        locs[k] = (files[int(d["file_name_id"])], funcs[int(d["function_name_id"])], int(d["line"]))
    for k, rest in map(fields, section("StackFrames")):
        d = dict(re.findall(r"(\w+)=(\d+)", rest))
        frames[k] = (int(d["file_location_id"]), int(d["parent_frame_id"]))

    def chain(fid):
        out = []
        while fid and fid in frames and len(out) < 64:
            loc, parent = frames[fid]
            out.append(locs[loc])
            fid = parent - 1 if parent else 0  # (printed 1-based; 0: none)
        return out

    return chain


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=1000)
    ap.add_argument("--warm", type=int, default=16, help="scan chunks run before the measurement")
    ap.add_argument("--chunks", type=int, default=2, help="scan chunks traced")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)

    import fast as bench
    import jax
    import jax.numpy as jnp

    from simrl.config import load_config
    from simrl.engine.sim import load_workload
    from simrl_fast import engine as E
    from simrl_fast.grid import lower_grid

    cols = bench.grid(np.random.default_rng(0), args.m)
    workload = load_workload(load_config(overrides=bench.BASE))
    static, params, wa = lower_grid(workload, bench.BASE_COSTS, cols, base=bench.BASE)
    static = E.blocked(static)
    p, w = jax.tree_util.tree_map(jnp.asarray, params), jax.tree_util.tree_map(jnp.asarray, wa)
    st = E._init_batch(static, args.m, E._traced())
    prog = E._chunk_program(static, st, p, w, False, E.RARE_WIDTH, E.ROUTE_WIDTH)
    txt = prog.as_text()
    for _ in range(args.warm):
        st, _, _ = prog(st, p, w)
    jax.block_until_ready(st)
    c0 = time.process_time()
    for _ in range(4):
        st, _, _ = prog(st, p, w)
    jax.block_until_ready(st)
    print(f"M = {args.m}: {(time.process_time() - c0) / (4 * static.chunk * args.m) * 1e6:.2f} us of CPU per step "
          f"and configuration (4 chunks of {static.chunk} steps after {args.warm})")
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(args.chunks):
                st, _, _ = prog(st, p, w)
            jax.block_until_ready(st)
        trace = json.load(gzip.open(glob.glob(tmp + "/plugins/profile/*/perfetto_trace.json.gz")[0]))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    tot = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith(("$", "Thunk", "Pjit", "Common")):
            tot[e["name"]] += e.get("dur", 0)
    chain = frame_table(txt)
    inst = {m.group(1): (m.group(2), int(m.group(3))) for m in re.finditer(
        r"^\s*(?:ROOT )?%([\w.\-]+) = (\S+) .*?stack_frame_id=(\d+)", txt, re.M)}
    allk = sum(tot.values()) or 1
    by_fam, by_line, top = collections.Counter(), collections.Counter(), []
    for name, us in tot.items():
        shape, fid = inst.get(name, ("?", 0))
        ch = chain(fid)
        line = f"{ch[0][0]}:{ch[0][2]} {ch[0][1]}" if ch else "?"
        fams = [c[1] for c in ch]
        by_fam[next((f for f in FAMILIES if f in fams), fams[-1] if fams else "?")] += us
        by_line[line] += us
        top.append((us, name, shape, line))
    steps = args.chunks * static.chunk
    print(f"kernels: {len(tot)} per step, {allk / 1e3 / steps:.2f} ms of kernel time per step (traced)")
    print("by family:")
    for k, v in by_fam.most_common():
        print(f"  {100 * v / allk:5.1f}% {k}")
    print("by line:")
    for k, v in by_line.most_common(args.top):
        print(f"  {100 * v / allk:5.1f}% {k}")
    print("kernels:")
    for us, name, shape, line in sorted(top, reverse=True)[:args.top]:
        print(f"  {100 * us / allk:5.1f}% {name} {shape} {line}")
    copies = [m.group(0).strip()[:120] for m in re.finditer(rf"^\s*(?:ROOT )?%copy[\w.]* = \w+\[{args.m},[^\]]*\].*$",
                                                           txt, re.M)]
    print(f"copies of [M, ...] arrays in the compiled chunk: {len(copies)}")
    for c in copies:
        print("  " + c)


if __name__ == "__main__":
    main()
