"""Every registered preset side by side on the default scenario and on a long-tailed workload.

Run: ``.venv/bin/python benchmarks/bench_presets.py [--steps N] [--groups G] [--seed S]``. For each
policy kind (``simrl.policy.registry.policy_kinds()``) and each workload it runs the default
configuration with ``policy=<kind>`` through ``simrl.engine.sim.simulate`` with the real
default cost models (``simrl.cost.build.build_costs``: roofline rollout, analytical training,
NCCL weight sync) and prints one table: trained tokens/s, mean and max staleness, tokens
wasted by abort and by filter, rollout and trainer idle fractions, simulated makespan and the
host seconds the run took. The workloads are ``workloads.generate("rl_math")`` (the default)
and ``rl_math`` with a heavier completion tail (p90 4k, p99 8k, cap 12k). If the cost models or
the generator are unavailable, it falls back to linear costs or a numpy workload and says so.
A third table runs the default workload with every preset's own staleness knob set so that its
bound is 2 versions (the question of the product description: with staleness bounded at 2 and the
same batch size, which systems stay latency-bound and which fill their queues?).
A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simrl.config import load_config  # noqa: E402
from simrl.engine.sim import SimulationError, simulate  # noqa: E402
from simrl.policy.registry import policy_kinds  # noqa: E402

HEAVY_TAIL = {
    "completion_knots": [[0, 32], [0.25, 400], [0.5, 900], [0.75, 1800], [0.9, 4000], [0.99, 8000], [1, 16384]],
    "max_completion": 12288,  # a 16k sample does not fit one training GPU of the default layout
}
# Each preset's own knob for "staleness bound 2" (None: the preset has no such bound).
BOUND_2 = {
    "psrl": ["policy.staleness=2"],
    "areal": ["policy.max_head_offpolicyness=2"],
    "roll": ["policy.async_generation_ratio=2"],
    "bounded_async": ["policy.max_staleness=2"],
    "skyrl": ["policy.max_staleness_steps=2"],
    "verl_v1": ["policy.trainer_mode=separate_async", "policy.max_off_policy_threshold=3"],
    "nemo_rl": ["policy.max_trajectory_age_steps=2"],
    "trl": ["policy.mode=async", "policy.max_staleness=2"],
    "prime_rl": ["policy.max_off_policy_steps=2"],
    "art": ["policy.max_steps_off_policy=2"],
    "openrlhf": ["policy.async_queue_size=2"],
    "dressage": ["policy.dressage_staleness_keep_versions=3"],
}
COLUMNS = ("preset", "groups", "tok/s", "stale", "max", "waste_abort", "waste_filter", "roll_idle", "train_idle",
           "makespan_s", "host_s")


def make_workloads(groups: int, seed: int, notes: list[str]):
    """(name, workload) pairs: the default rl_math and a heavy-tailed variant."""
    try:
        import workloads

        return [("rl_math", workloads.generate("rl_math", groups=groups, seed=seed)),
                ("rl_math heavy tail", workloads.generate("rl_math", groups=groups, seed=seed, **HEAVY_TAIL))]
    except Exception as exc:  # the generator is another module's; keep the benchmark usable
        notes.append(f"workloads.generate unavailable ({exc}); using numpy-generated log-normal workloads")
        return [("lognormal", numpy_workload(groups, seed, sigma=0.8)),
                ("lognormal heavy tail", numpy_workload(groups, seed, sigma=1.4))]


def numpy_workload(groups: int, seed: int, sigma: float, n: int = 8):
    from workloads.types import build_workload, single_turn_group

    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        comps = np.minimum(rng.lognormal(np.log(600), sigma, n), 16384).astype(int) + 1
        rewards = [1.0] * n if rng.random() < 0.25 else [float(i % 2) for i in range(n)]
        out.append(single_turn_group(g, n, int(rng.integers(100, 1000)), [int(c) for c in comps], rewards))
    return build_workload("lognormal", seed, out)


def linear_fallback(notes: list[str]):
    from simrl.cost.linear import ConstantSync, ConstantTraining, LinearRollout

    class Costs:
        rollout = LinearRollout(a=0.005, b=2e-5, c=1e-8, p=5e-5, kv_tokens=1_000_000)
        training = ConstantTraining(a=10.0)
        weight_sync = ConstantSync(1.0)

        def domain_reports(self):
            return []

    notes.append("simrl.cost.build.build_costs unavailable; using the tests' linear cost models")
    return Costs()


def run_one(kind: str, workload, steps: int, costs, notes: list[str], extra: tuple[str, ...] = ()) -> dict:
    cfg = load_config(overrides=[f"policy={kind}", f"run.training_steps={steps}", "run.telemetry=false",
                                 f"workload.groups={workload.n_groups}", *extra])
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():  # validity-domain warnings are counted in the report
            warnings.simplefilter("ignore", UserWarning)
            report = simulate(cfg, workload, costs)
    except SimulationError as exc:
        return {"preset": kind, "error": str(exc).splitlines()[0][:90]}
    except ImportError as exc:
        if costs is not None:
            raise
        return run_one(kind, workload, steps, linear_fallback(notes), notes, extra) | {"fallback": str(exc)}
    t = report.totals
    row = {
        "preset": kind, "groups": sum(s.groups for s in report.steps), "tok/s": t["trained_tokens_per_s"], "stale": t["staleness_mean"],
        "max": t["staleness_max"], "waste_abort": t["tokens_wasted_abort"],
        "waste_filter": t["tokens_wasted_filter"], "roll_idle": 1 - t["rollout_busy_fraction"],
        "train_idle": 1 - t["trainer_busy_fraction"], "makespan_s": t["makespan_s"],
        "host_s": time.perf_counter() - t0,
    }
    if report.diagnosis:
        row["error"] = "stopped: " + report.diagnosis.splitlines()[0][:80]
    return row


def fmt(row: dict) -> str:
    if "tok/s" not in row:
        return f"| {row['preset']} | " + " | ".join(["—"] * (len(COLUMNS) - 2)) + f" | {row['error']} |"
    cells = [row["preset"], str(row["groups"]), f"{row['tok/s']:,.0f}", f"{row['stale']:.2f}", str(row["max"]),
             f"{row['waste_abort']:,}", f"{row['waste_filter']:,}", f"{row['roll_idle']:.2f}",
             f"{row['train_idle']:.2f}", f"{row['makespan_s']:.0f}", f"{row['host_s']:.1f}"]
    return "| " + " | ".join(cells) + " |" + (f" {row['error']}" if "error" in row else "")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--groups", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", help="preset kinds to run (default: all registered)")
    args = ap.parse_args(argv)
    notes: list[str] = []
    costs = None  # None: simulate() builds the default cost models from the config
    try:
        from simrl.cost.build import build_costs  # noqa: F401
    except ImportError:
        costs = linear_fallback(notes)
    kinds = args.only or policy_kinds()
    loads = make_workloads(args.groups, args.seed, notes)
    for name, wl in loads:
        print(f"\n### {name}: {wl.n_groups} groups, {args.steps} steps, default deployment\n")
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for kind in kinds:
            print(fmt(run_one(kind, wl, args.steps, costs, notes)), flush=True)
    name, wl = loads[0]
    print(f"\n### {name}, every preset's staleness bound set to 2 versions\n")
    print("| " + " | ".join(COLUMNS) + " | knobs |")
    print("|" + "---|" * (len(COLUMNS) + 1))
    for kind in kinds:
        if kind in BOUND_2:
            row = run_one(kind, wl, args.steps, costs, notes, tuple(BOUND_2[kind]))
            print(fmt(row) + " " + " ".join(BOUND_2[kind]) + " |", flush=True)
    for note in dict.fromkeys(notes):
        print(f"\nnote: {note}")


if __name__ == "__main__":
    main()
