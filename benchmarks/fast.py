"""SimPy vs the JAX fast path on a default-like scenario inside the fast path's feature set.

Scenario: rl_math, 160 groups x 8 samples, 5 training steps, batches of 32 groups, linear
rollout costs, constant training and sync; configurations vary instances (1-4), staleness
(0-2), in-flight rule, router, max_num_seqs and cost coefficients, as grid columns lowered by
`simrl_fast.grid.lower_grid` (the base configuration parsed and lowered once). Prints, in one
run: SimPy's time per configuration; host-side setup per configuration (grid lowering, and
parsing + lowering point by point for comparison); for each M (default 100, 1,000 and 10,000)
the JAX engine's compile time, run time, ms per configuration, configs/s and the ratio to
SimPy per configuration; the worst relative error against SimPy on a sample; and what the fast
path does with a multi-turn scenario. The compile time is what this process paid: with the
persistent compilation cache warm (on by default, `SIMRL_FAST_CACHE=0` turns it off) it is the
time to load the compiled program. `run_params` sorts the configurations by expected work before
cutting them into batches (results in the given order) and splits each batch over all local
devices; `benchmarks/sweep10k.yaml` is the same scenario as a 10,080-point `srl-sweep` space (the
sweep's wall time: setup, compile, simulation and output, see docs/search.md).

    .venv/bin/python benchmarks/fast.py [--sizes 100,1000,10000] [--sample 6] [--chunk 1000] [--local-rounds 0,2]
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


BASE = ["deployment.rollout.max_num_batched_tokens=0", "deployment.rollout.prefix_caching=false",
        "deployment.rollout.kv_policy=reserve", "router.active_cap=0", "policy=bounded_async", "policy.batch_groups=32",
        "workload.groups=160", "run.training_steps=5", "deployment.rollout.kv_capacity_tokens=400000"]
BASE_COSTS = Costs(LinearRollout(kv_tokens=400_000), ConstantTraining(), ConstantSync(1.0))


def grid(rng: np.random.Generator, m: int) -> dict[str, np.ndarray]:
    """M random points of the default scenario, as grid columns (config keys and cost coefficients)."""
    return {
        "policy.max_staleness": rng.integers(0, 3, m), "policy.inflight_rule": rng.choice(RULES, m),
        "deployment.rollout.instances": rng.integers(1, 5, m),
        "deployment.rollout.max_num_seqs": rng.choice([64, 128, 256], m),
        "router.name": rng.choice(["least_requests", "round_robin"], m),
        "cost.rollout.a": rng.uniform(0.004, 0.008, m), "cost.rollout.b": rng.uniform(1e-5, 4e-5, m),
        "cost.rollout.c": rng.uniform(5e-9, 2e-8, m), "cost.rollout.p": rng.uniform(2e-5, 8e-5, m),
        "cost.training.a": rng.uniform(5, 15, m), "cost.weight_sync.publish_s": rng.uniform(0.5, 2, m),
    }


def point(cols: dict, m: int):
    """Point ``m`` as a full configuration and its cost models (what SimPy runs, and per-point lowering)."""
    cfg_keys = [k for k in cols if not k.startswith("cost.")]
    cfg = load_config(overrides=[*BASE, *(f"{k}={cols[k][m]}" for k in cfg_keys)])
    c = {k: float(cols[k][m]) for k in cols if k.startswith("cost.")}
    costs = Costs(LinearRollout(a=c["cost.rollout.a"], b=c["cost.rollout.b"], c=c["cost.rollout.c"],
                                p=c["cost.rollout.p"], kv_tokens=400_000),
                  ConstantTraining(a=c["cost.training.a"]), ConstantSync(c["cost.weight_sync.publish_s"]))
    return cfg, costs


def multi_turn_line(workload_name: str = "multi_turn") -> str:
    """The multi-turn scenario: what the fast path does with it (today: the rejection, by name)."""
    from simrl_fast import FastPathUnsupported, lower

    cfg = load_config(overrides=[*BASE, f"workload.generator={workload_name}"])
    try:
        wl = load_workload(cfg)
        lower(cfg, wl, BASE_COSTS)
    except FastPathUnsupported as exc:
        return f"multi-turn scenario (workload.generator={workload_name}): rejected: {exc}"
    return f"multi-turn scenario (workload.generator={workload_name}): accepted"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000", help="batch sizes M, comma-separated")
    ap.add_argument("--sample", type=int, default=6, help="SimPy runs (timing and error check)")
    ap.add_argument("--chunk", type=int, default=1000, help="configurations per vmapped call")
    ap.add_argument("--local-rounds", default=None,
                    help="comma-separated rounds of parallel local boundaries per scan step to run side by side "
                         "(simrl_fast.state.LOCAL_ROUNDS; default: the SIMRL_FAST_LOCAL_ROUNDS setting, 0 = off)")
    args = ap.parse_args(argv)
    from simrl_fast.engine import cache_dir, run_params
    from simrl_fast.grid import lower_grid
    from simrl_fast.lowering import lower, lower_workload

    rng = np.random.default_rng(0)
    sizes = [int(x) for x in args.sizes.split(",")]
    cols = grid(rng, max(sizes))
    workload = load_workload(load_config(overrides=BASE))
    t0 = time.perf_counter()
    static, params, wa = lower_grid(workload, BASE_COSTS, cols, base=BASE)
    grid_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    k = 50
    pts = [point(cols, m) for m in range(k)]
    parse_s = (time.perf_counter() - t0) / k
    wa1 = lower_workload(workload)
    t0 = time.perf_counter()
    for cfg, costs in pts:
        lower(cfg, workload, costs, wa=wa1)
    lower_s = (time.perf_counter() - t0) / k
    def rows(lo, hi):
        return params._replace(**{f: getattr(params, f)[lo:hi] for f in params._fields})

    simpy_s, worst = [], 0.0
    sample_res = run_params(rows(0, args.sample), wa, static=static)
    for m in range(args.sample):
        cfg, costs = pts[m]
        t0 = time.perf_counter()
        rep = simulate(cfg, workload, costs)
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
    per_grid = grid_s / max(sizes)
    print(f"host-side setup per configuration: grid lowering (lower_grid, base lowered once) {per_grid * 1e3:.3f} ms; "
          f"per point: config parsing {parse_s * 1e3:.2f} ms + lowering {lower_s * 1e3:.3f} ms")
    print(f"persistent compilation cache: {cache_dir() or 'off'}")
    import jax

    from simrl_fast import state as fast_state

    rounds_list = ([int(x) for x in args.local_rounds.split(",")] if args.local_rounds
                   else [fast_state.LOCAL_ROUNDS])
    print(f"{'rounds':>6} {'M':>7} {'chunk':>6} {'compile s':>9} {'run s':>8} {'per config ms':>14} {'configs/s':>10} "
          f"{'vs SimPy':>9} {'CPU ms/config':>13} {'with compile s':>14} {'steps/config':>12}")
    for M, rounds in ((M, r) for M in sizes for r in rounds_list):
        if rounds != fast_state.LOCAL_ROUNDS:
            fast_state.LOCAL_ROUNDS = rounds
            jax.clear_caches()  # the rounds are read when the step is traced
        chunk = min(M, args.chunk)
        sub, st = rows(0, M), static  # one Static for every M (the whole grid's)
        t0 = time.perf_counter()
        run_params(rows(0, chunk), wa, static=st)  # compile this batch size (and run one chunk)
        first = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        res = run_params(sub, wa, chunk=chunk, static=st)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert res.complete.all()
        compile_s = max(first - wall * chunk / M, 0.0)
        print(f"{rounds:>6} {M:>7} {chunk:>6} {compile_s:>9.2f} {wall:>8.2f} {wall / M * 1e3:>14.2f} {M / wall:>10.0f} "
              f"{sp / (wall / M):>8.0f}x {cpu / M * 1e3:>13.2f} {compile_s + wall + M * per_grid:>14.1f} "
              f"{res.actions.mean():>12.0f}", flush=True)
    print("CPU ms/config: CPU time of this process per configuration in the run (steadier than wall time on a loaded "
          "machine; above the wall time where XLA runs on several cores); "
          "with compile s: compile + run + host-side grid lowering of the M configurations; "
          "steps/config: scan steps that did something, mean over the M configurations; rounds: parallel local "
          "boundary rounds per scan step (0: one action per step)")
    print(multi_turn_line())


if __name__ == "__main__":
    main()
