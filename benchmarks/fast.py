"""SimPy vs the JAX fast path on a default-like scenario inside the fast path's feature set.

Scenario: rl_math, 160 groups x 8 samples, 5 training steps, batches of 32 groups, linear
rollout costs, constant training and sync; configurations vary instances (1-4), staleness
(0-2), in-flight rule, router, max_num_seqs and cost coefficients. Prints, in one run: SimPy's
time per configuration; host-side setup per configuration (config parsing, lowering); and for
M = 100 and 1,000 configurations (10,000 with --big) the JAX engine's compile time, run time,
ms per configuration, configs/s and the ratio to SimPy per configuration; plus the worst
relative error against SimPy on a sample. The compile time is what this process paid: with
the persistent compilation cache warm (on by default, `SIMRL_FAST_CACHE=0` turns it off) it
is the time to load the compiled program.

    .venv/bin/python benchmarks/fast.py [--big] [--sample 6] [--chunk 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simrl.config import load_config  # noqa: E402
from simrl.cost.build import Costs  # noqa: E402
from simrl.cost.linear import ConstantSync, ConstantTraining, LinearRollout  # noqa: E402
from simrl.engine.sim import load_workload, simulate  # noqa: E402

RULES = ["continue", "keep_pause", "abort_resume", "drain"]


def scenario(rng: np.random.Generator):
    ov = ["deployment.rollout.max_num_batched_tokens=0", "deployment.rollout.prefix_caching=false",
          "deployment.rollout.kv_policy=reserve", "router.active_cap=0", "policy=bounded_async",
          "policy.batch_groups=32", f"policy.max_staleness={int(rng.integers(0, 3))}",
          f"policy.inflight_rule={rng.choice(RULES)}", f"deployment.rollout.instances={int(rng.integers(1, 5))}",
          f"deployment.rollout.max_num_seqs={int(rng.choice([64, 128, 256]))}",
          f"router.name={rng.choice(['least_requests', 'round_robin'])}", "workload.groups=160", "run.training_steps=5",
          "deployment.rollout.kv_capacity_tokens=400000"]
    costs = Costs(LinearRollout(a=float(rng.uniform(0.004, 0.008)), b=float(rng.uniform(1e-5, 4e-5)),
                                c=float(rng.uniform(5e-9, 2e-8)), p=float(rng.uniform(2e-5, 8e-5)), kv_tokens=400_000),
                  ConstantTraining(a=float(rng.uniform(5, 15))), ConstantSync(float(rng.uniform(0.5, 2))))
    return load_config(overrides=ov), costs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", action="store_true", help="also M = 10,000")
    ap.add_argument("--sample", type=int, default=6, help="SimPy runs (timing and error check)")
    ap.add_argument("--chunk", type=int, default=100, help="configurations per vmapped call (cache-sized)")
    args = ap.parse_args(argv)
    from simrl_fast.engine import cache_dir, run_params
    from simrl_fast.lowering import lower, lower_workload, static_for

    rng = np.random.default_rng(0)
    sizes = [100, 1000] + ([10_000] if args.big else [])
    t0 = time.perf_counter()
    pairs = [scenario(rng) for _ in range(max(sizes))]
    parse_s = (time.perf_counter() - t0) / len(pairs)
    workload = load_workload(pairs[0][0])
    t0 = time.perf_counter()
    wa = lower_workload(workload)
    lowered = [lower(cfg, workload, costs, wa=wa) for cfg, costs in pairs]
    lower_s = (time.perf_counter() - t0) / len(pairs)
    t0 = time.perf_counter()
    for cfg, costs in pairs[:50]:
        lower(cfg, workload, costs)
    lower_each_s = (time.perf_counter() - t0) / 50
    params = [p for _, p, _ in lowered]
    mg = static_for(params, wa).max_groups  # one Static for every M: one program per batch size

    simpy_s, worst = [], 0.0
    sample_res = run_params(params[: args.sample], wa, max_groups=mg)
    for m in range(args.sample):
        t0 = time.perf_counter()
        rep = simulate(pairs[m][0], workload, pairs[m][1])
        simpy_s.append(time.perf_counter() - t0)
        for j, s in enumerate(rep.steps):
            for name in ("batch_ready", "train_end", "publish_end"):
                ref = getattr(s, name)
                worst = max(worst, abs(float(getattr(sample_res, name)[m, j]) - ref) / ref)
            assert tuple(int(x) for x in sample_res.stale[m, j, :32]) == s.staleness
    sp = statistics.median(simpy_s)
    print(f"scenario: rl_math 160 groups x 8, 5 steps, batch 32; {workload.n_calls} calls per epoch")
    print(f"SimPy: {sp * 1e3:.0f} ms per configuration (median of {len(simpy_s)}), {1 / sp:.1f} configs/s")
    print(f"worst relative error of step times vs SimPy over {args.sample} configurations: {worst:.1e}"
          " (staleness per group: identical)")
    print(f"host-side setup per configuration: config parsing {parse_s * 1e3:.2f} ms; lowering "
          f"{lower_s * 1e3:.3f} ms with the workload lowered once ({lower_each_s * 1e3:.2f} ms lowering it each time)")
    print(f"persistent compilation cache: {cache_dir() or 'off'}")
    print(f"{'M':>7} {'chunk':>6} {'compile s':>9} {'run s':>8} {'per config ms':>14} {'configs/s':>10} "
          f"{'vs SimPy':>9} {'with compile s':>14}")
    for M in sizes:
        chunk = min(M, args.chunk)
        t0 = time.perf_counter()
        run_params(params[:chunk], wa, max_groups=mg)  # compile this batch size (and run one chunk)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = run_params(params[:M], wa, chunk=chunk, max_groups=mg)
        wall = time.perf_counter() - t0
        assert res.complete.all()
        compile_s = max(first - wall * chunk / M, 0.0)
        print(f"{M:>7} {chunk:>6} {compile_s:>9.2f} {wall:>8.2f} {wall / M * 1e3:>14.2f} {M / wall:>10.0f} "
              f"{sp / (wall / M):>8.0f}x {compile_s + wall + M * (parse_s + lower_s):>14.1f}")
    print("with compile s: compile + run + host-side setup of the M configurations")


if __name__ == "__main__":
    main()
