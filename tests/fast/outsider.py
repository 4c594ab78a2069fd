"""An outsider's differential generator: configurations written as a user writes them, both engines run
through the public entry points, compared per step and per call.

    PYTHONPATH=.:tests:tests/fast .venv/bin/python tests/fast/outsider.py --seeds 0:40 [--groups 6 --n 4]

Independent of `diffcases.random_case` and `widecases.wide_case` (which build records and cost objects in
code): every case here is only a list of ``key=value`` overrides of the documented configuration
(`srl config`), loaded with `simrl.config.load_config`, its workload from `simrl.engine.sim.load_workload` and
its costs from `simrl.cost.build.build_costs` (what `srl` and `srl-sweep` do). Each case draws:

- a registered policy (every preset and built-in) at its defaults, then zero to three of its documented knobs
  changed, each drawn from its type in `srl config policy=NAME` (booleans flipped, integers and floats from
  0, 1, 2, small values, half and twice the default, strings from the documented choices);
- the deployment: model (dense, MoE, a sliding-window model), instances 1..4, tp, max_num_seqs down to 1,
  KV capacity from the GPU memory or a few calls' need (preemption), reserve or on_demand, chunked prefill
  from tiny to the default budget, prefix caching, colocated placement;
- the router (every name, an active_cap, dp_shard's slice), training steps 1..4, a time horizon (refused);
- the workload generator and its knobs (rl_math / rl_code / constant / long_generation with short lengths,
  multi_turn and tool latency, which are refused; `constant` with round lengths: ties);
- the cost families from their documented names and knobs: roofline (knobs or the fitted artifact), linear
  with dyadic coefficients (exact ties), composed (refused); analytical, constant, fixed, the analytical
  artifact (refused); nccl, checkpoint_engine, filesystem, lora, fixed.

Anything `simrl_fast.lower` accepts must match SimPy exactly (`diffcases.compare`, rel=0); anything it refuses
must raise `FastPathUnsupported` / `FastPathNoProgress` naming the reason. Any other exception from the fast
path's lowering or run is a finding. Cases whose configuration the loader or the cost builders refuse
(ConfigError, CostModelError: a user's mistake, named) or that SimPy itself stops are counted, not compared.
``--sweep``: `srl-sweep`'s grid mode instead (`simrl_explore.sweep.run_sweep` on a drawn base the fast path accepts,
with linear costs, and two drawn axes: direct keys, cost columns, policy-free deployment keys), once with
``engine=auto`` and once on SimPy: every point the fast path ran must give the same row (status and every metric).
Not collected by pytest (no test_ prefix); tests/fast/test_outsider.py runs a few seeds with ``-m slow``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: simhelpers
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/fast: diffcases

import numpy as np  # noqa: E402
import yaml  # noqa: E402

POLICIES = ["sync", "bounded_async", "areal", "art", "dressage", "nemo_rl", "openrlhf", "prime_rl", "psrl", "roll",
            "skyrl", "slime", "trl", "verl", "verl_v1"]
# documented choices of string knobs (presets/README.md and each preset's knob table)
CHOICES = {
    "inflight_rule": ["continue", "keep_pause", "abort_resume", "abort_restart", "drain", "swap_in_place"],
    "should_accept_fn": ["none", "nonzero_std"],
    "rollout_weight_update_mode": ["step_lora", "in_flight_lora"],
    "rollout_mode": ["fully_async", "partial_async"],
    "concurrency_control": ["aimd", "kappa_ewma"],
    "sync_strategy": ["greedy", "status_based"],
    "sync_indicator": ["request_num", "kv_cache"],
    "fine_grain_overlap_granularity": ["none", "mini_batch", "micro_batch"],
    "fine_grain_overlap_scope": ["recompute", "pre_step"],
    "query_filter_type": ["no_filter", "mean_filter", "std_filter"],
    "dynamic_sampling_filter_path": ["check_reward_nonzero_std"],
    "filter_groups_metric": ["acc"],
    "max_off_policy_strategy": ["drop", "wait"],
}
MODES = {"verl": ["fully_async", "one_step_off"], "trl": ["sync", "async"],
         "slime": ["sync", "train_async", "fully_async"], "verl_v1": ["sync", "colocate_async", "separate_async"]}
# (weights: the draws the fast path refuses by name -- a sliding-window model, multi-call workloads, a horizon,
# the two routers it does not model, the composed rollout and fitted analytical training -- are kept rare)
MODELS = (["qwen3-8b", "qwen2.5-7b", "qwen2.5-1.5b", "qwen3-30b-a3b", "gpt-oss-20b"], [0.45, 0.2, 0.15, 0.15, 0.05])
GENERATORS = (["rl_math", "constant", "rl_code", "long_generation", "multi_turn", "tool_history"],
              [0.35, 0.35, 0.1, 0.1, 0.05, 0.05])
_DEFAULTS: dict[str, dict] = {}


def policy_defaults(name: str) -> dict:
    """The policy section of ``srl config policy=NAME`` (what a user reads before overriding knobs)."""
    if name not in _DEFAULTS:
        from simrl.config import load_config, to_yaml

        _DEFAULTS[name] = yaml.safe_load(to_yaml(load_config(overrides=[f"policy={name}"])))["policy"]
    return _DEFAULTS[name]


def knob_value(rng: np.random.Generator, key: str, default):
    """A value for a knob of default ``default``, drawn by its type (extremes included)."""
    if key in CHOICES:
        return str(rng.choice(CHOICES[key]))
    if isinstance(default, bool):
        return str(not default).lower()
    if isinstance(default, int) or default is None:
        d = default if isinstance(default, int) and default > 0 else 4
        return int(rng.choice([0, 1, 1, 2, 3, max(1, d // 2), d, 2 * d, int(rng.integers(1, 2 * d + 2))]))
    if isinstance(default, float):
        return float(rng.choice([0.0, 0.5, 1.0, 2.0, default / 2, default * 2, -1.0]))
    return None  # (strings without documented choices are left at their default)


def draw_policy(rng: np.random.Generator) -> tuple[list[str], str]:
    name = str(rng.choice(POLICIES))
    ov = [f"policy={name}"]
    knobs = {k: v for k, v in policy_defaults(name).items() if k != "kind"}
    if name in MODES and rng.random() < 0.6:
        ov.append(f"policy.mode={rng.choice(MODES[name])}" if name != "verl_v1"
                  else f"policy.trainer_mode={rng.choice(MODES[name])}")
    keys = sorted(knobs)
    for k in rng.choice(keys, size=min(len(keys), int(rng.choice([0, 1, 1, 2, 3]))), replace=False):
        v = knob_value(rng, str(k), knobs[str(k)])
        if v is not None and not str(k).endswith("mode"):
            ov.append(f"policy.{k}={v}")
    return ov, name


def draw_case(rng: np.random.Generator, groups: int, n: int) -> list[str]:
    """One configuration as a list of overrides (the workload's groups and group size fixed: one batch shape)."""
    ov, _ = draw_policy(rng)
    model = str(rng.choice(MODELS[0], p=MODELS[1]))
    ov.append(f"deployment.model={model}")
    # rollout deployment
    ov.append(f"deployment.rollout.instances={int(rng.choice([1, 1, 2, 3, 4]))}")
    tp = 2 if rng.random() < 0.2 else 1
    if tp == 2:
        ov.append("deployment.rollout.tp=2")
    ov.append(f"deployment.rollout.max_num_seqs={int(rng.choice([1, 2, 4, 7, 16, 64, 256]))}")
    ov.append(f"deployment.rollout.kv_policy={rng.choice(['on_demand', 'reserve'])}")
    ov.append(f"deployment.rollout.max_num_batched_tokens={int(rng.choice([8192, 8192, 0, 2048, 256, 64, 16]))}")
    ov.append(f"deployment.rollout.prefix_caching={str(rng.random() < 0.6).lower()}")
    if rng.random() < 0.3:  # a small KV cache (in tokens): a few calls' need, preemptions and evictions
        ov.append(f"deployment.rollout.kv_capacity_tokens={int(rng.choice([1500, 3000, 6000, 20000]))}")
    if rng.random() < 0.25:
        ov.append("deployment.placement=colocated")
    # router
    r = str(rng.choice(["least_requests", "round_robin", "dp_shard", "throughput_balance", "kv_cache_aware"],
                       p=[0.4, 0.25, 0.25, 0.05, 0.05]))
    ov.append(f"router.name={r}")
    if r == "dp_shard" and rng.random() < 0.7:
        ov.append(f"router.shard_calls={int(rng.choice([1, 2, n, 3 * n]))}")
    if rng.random() < 0.3:
        ov.append(f"router.active_cap={int(rng.choice([1, 2, n, 64]))}")
    # run
    ov.append(f"run.training_steps={int(rng.choice([1, 2, 2, 3, 4]))}")
    ov.append(f"run.seed={int(rng.integers(0, 1000))}")
    if rng.random() < 0.05:
        ov.append(f"run.time_horizon_s={float(rng.choice([1.0, 30.0, 100.0]))}")
    # workload (groups and group size fixed per batch; lengths kept short so SimPy stays quick)
    gen = str(rng.choice(GENERATORS[0], p=GENERATORS[1]))
    ov += [f"workload.generator={gen}", f"workload.groups={groups}", f"workload.group_size={n}"]
    if gen in ("rl_math", "rl_code"):
        ov.append(f"workload.knobs.max_completion={int(rng.choice([64, 256, 1024]))}")
        ov.append(f"workload.knobs.zero_variance_fraction={float(rng.choice([0.0, 0.25, 0.5, 1.0]))}")
        if gen == "rl_code":
            ov.append(f"workload.knobs.calls={int(rng.choice([1, 1, 1, 2]))}")
    elif gen == "constant":
        ov.append(f"workload.knobs.prompt={int(rng.choice([1, 64, 128, 512]))}")
        ov.append(f"workload.knobs.completion={int(rng.choice([1, 16, 64, 256]))}")
        if rng.random() < 0.4:
            ov.append(f"workload.knobs.shared_prompt={int(rng.choice([0, 32, 64]))}")
        if rng.random() < 0.05:
            ov.append(f"workload.knobs.calls={int(rng.choice([2, 3]))}")
        if rng.random() < 0.1:
            ov.append(f"workload.knobs.tool_latency_s={float(rng.choice([0.0, 0.5]))}")
    elif gen == "multi_turn":
        ov.append(f"workload.knobs.calls={int(rng.choice([1, 2]))}")
        ov.append(f"workload.knobs.tool_latency_s={float(rng.choice([0.0, 0.25]))}")
    elif gen == "tool_history":
        ov.append("workload.knobs.history_turns=1")
    # costs
    ro = str(rng.choice(["roofline", "linear", "fitted_roofline", "composed"], p=[0.4, 0.4, 0.15, 0.05]))
    if ro == "linear":  # dyadic coefficients: exact sums, so ties between instances are exact
        ov += ["cost.rollout=linear", f"cost.rollout_knobs.a={rng.choice([0.0078125, 0.015625, 0.03125])}",
               f"cost.rollout_knobs.b={rng.choice([0.0, 2.0 ** -10, 2.0 ** -12])}",
               f"cost.rollout_knobs.c={rng.choice([0.0, 0.0, 2.0 ** -20])}",
               f"cost.rollout_knobs.p={rng.choice([0.0, 2.0 ** -14, 2.0 ** -16])}",
               f"cost.rollout_knobs.kv_tokens={int(rng.choice([2000, 5000, 100000]))}"]
        if tp == 2:  # (the layout the coefficients describe, as the linear family requires)
            ov.append("cost.rollout_knobs.fitted_for.tp=2")
    elif ro == "fitted_roofline":
        ov.append("cost.rollout=simrl/cost/data/rollout-roofline-h100.json")
    elif ro == "composed":
        ov.append("cost.rollout=simrl/cost/data/rollout-composed-h100.json")
    tr = str(rng.choice(["analytical", "constant", "fixed", "artifact"], p=[0.45, 0.3, 0.2, 0.05]))
    if tr == "constant":
        ov += ["cost.training=constant", f"cost.training_knobs.a={rng.choice([0.5, 1.0, 4.0])}",
               f"cost.training_knobs.per_token={rng.choice([0.0, 2.0 ** -12])}"]
    elif tr == "fixed":
        ov += ["cost.training=fixed", f"cost.training_knobs.step_s={rng.choice([1.0, 2.0, 8.0])}"]
    elif tr == "artifact":
        ov.append("cost.training=simrl/cost/data/training-analytical-h100.json")
    ws = str(rng.choice(["nccl", "nccl", "checkpoint_engine", "filesystem", "lora", "fixed"]))
    ov.append(f"cost.weight_sync={ws}")
    if ws == "fixed":
        ov.append(f"cost.weight_sync_knobs.publish_s={rng.choice([0.25, 1.0, 2.0])}")
    # drawn last (the draws above keep a seed's values): more deployment and cost knobs, rare refusals
    if ro == "roofline" and rng.random() < 0.4:
        ov += [f"cost.rollout_knobs.overhead_s={rng.choice([0.0, 0.001, 0.003])}",
               f"cost.rollout_knobs.overhead_per_seq_s={rng.choice([0.0, 3e-5])}",
               f"cost.rollout_knobs.compute_efficiency={rng.choice([0.5, 0.6])}"]
    if rng.random() < 0.2:
        ov.append(f"deployment.rollout.gpu_memory_utilization={rng.choice([0.5, 0.7, 0.95])}")
    if rng.random() < 0.15:
        ov.append(f"deployment.rollout.gpu={rng.choice(['H200', 'A100', 'B200', 'L40S'])}")
    if rng.random() < 0.1:
        ov.append(f"deployment.rollout.dp={rng.choice([2, 4])}")
    if rng.random() < 0.06:
        ov.append(str(rng.choice(["deployment.training.reward_s_per_trajectory=0.01",
                                  "deployment.training.trigger_parameter_sync_step=2",
                                  "deployment.training.test_freq=1", "deployment.training.reward_workers=4"])))
    return ov


def prepare(overrides: list[str]):
    """(cfg, workload, costs) through the public loaders, or the named reason a user's configuration is refused."""
    from simrl.config import ConfigError, load_config
    from simrl.cost.base import CostModelError
    from simrl.cost.build import build_costs
    from simrl.engine.core import SimulationError
    from simrl.engine.sim import load_workload

    try:
        cfg = load_config(overrides=overrides)
        wl = load_workload(cfg)
        costs = build_costs(cfg)
    except (ConfigError, CostModelError, SimulationError, ValueError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return cfg, wl, costs


def fixed_static(need):
    """One shape for every batch of a scan (every feature traced, the draws' largest sizes; power-of-two group
    slots), so the program compiles once and comes from the persistent cache afterwards."""
    mg = 1 << max(need.max_groups - 1, 127).bit_length()
    return need._replace(instances=4, slots=256, max_groups=mg, steps=4, max_batch=max(need.max_batch, 64),
                         max_chunks=1 << 15, formulas=3, on_demand=True, chunked_prefill=True, prefix=True,
                         crossing=True, perinst=True, cross_window=mg * need.group_size, dispatch_age=True,
                         oldest_first=True, episode_cap=True)


def run_batch(seeds: list[int], groups: int, n: int, verbose: bool = False) -> dict:
    """Draw, run and compare the cases of ``seeds``; return counts and findings."""
    import warnings

    from diffcases import Case, run_compared

    from simrl.engine.core import SimulationError
    from simrl_fast.lowering import FastPathNoProgress, FastPathUnsupported, lower, static_for

    out = {"cases": 0, "config_refused": 0, "simpy_stopped": 0, "fast_refused": 0, "compared": 0,
           "mismatch": [], "crash": [], "refusals": {}}
    accepted = []
    for s in seeds:
        ov = draw_case(np.random.default_rng([s, zlib.crc32(b"outsider")]), groups, n)
        out["cases"] += 1
        got = prepare(ov)
        if isinstance(got, str):
            out["config_refused"] += 1
            continue
        cfg, wl, costs = got
        try:
            _, p, wa = lower(cfg, wl, costs)
        except (FastPathUnsupported, FastPathNoProgress) as exc:
            out["fast_refused"] += 1
            why = str(exc).split(";")[0][:90]
            out["refusals"][why] = out["refusals"].get(why, 0) + 1
            continue
        except Exception as exc:  # noqa: BLE001 (a crash is the finding)
            out["crash"].append((s, "lower", f"{type(exc).__name__}: {exc}"[:300], ov))
            continue
        case = Case(ov, wl, costs, label=f"seed {s}: " + " ".join(ov))
        case.cfg = cfg
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                case.run_simpy()
        except SimulationError as exc:
            out["simpy_stopped"] += 1
            out["crash"].append((s, "simpy stopped an accepted config", str(exc)[:200], ov))
            continue
        if case.report.diagnosis:
            out["simpy_stopped"] += 1
            if verbose:
                print(f"seed {s}: simpy diagnosis {case.report.diagnosis.splitlines()[0][:150]}")
        accepted.append((s, case, p, wa))
    if accepted:
        ps, was = [a[2] for a in accepted], [a[3] for a in accepted]
        static = fixed_static(static_for(ps, was[0]))
        try:
            _, differ = run_compared([a[1] for a in accepted], ps, was, static)
        except Exception as exc:  # noqa: BLE001
            out["crash"].append((seeds[0], "run_params", f"{type(exc).__name__}: {exc}"[:300], []))
            traceback.print_exc()
            return out
        out["compared"] += len(accepted)
        for m, exc in differ:
            s, case = accepted[m][0], accepted[m][1]
            out["mismatch"].append((s, str(exc).splitlines()[0][:400], case.overrides))
    return out


# axes a user sweeps with `srl-sweep --grid KEY=V1,V2` (values drawn per sweep)
AXES = {
    "deployment.rollout.max_num_seqs": lambda r: [1, 3, 16, 256],
    "deployment.rollout.instances": lambda r: [1, 2, 3],
    "deployment.rollout.kv_capacity_tokens": lambda r: [4000, 9000, 100000],
    "deployment.rollout.max_num_batched_tokens": lambda r: [0, 64, 8192],
    "router.name": lambda r: ["least_requests", "round_robin", "dp_shard"],
    "router.active_cap": lambda r: [0, 1, 3],
    "run.training_steps": lambda r: [1, 3],
    "cost.weight_sync_knobs.publish_s": lambda r: [0.25, 1.0],
    "cost.rollout_knobs.a": lambda r: [0.0078125, 0.03125],
    "cost.rollout_knobs.c": lambda r: [0.0, 2.0 ** -20],
    "cost.training_knobs.a": lambda r: [0.5, 4.0],
}


def sweep_case(seed: int, groups: int, n: int):
    """(base overrides, grid) of one sweep: a drawn case the fast path accepts (linear costs, so the cost
    columns can be swept) and two axes; None when the draw is refused."""
    from simrl_fast.lowering import FastPathNoProgress, FastPathUnsupported, lower

    rng = np.random.default_rng([seed, zlib.crc32(b"outsider-sweep")])
    ov = [o for o in draw_case(rng, groups, n) if not o.startswith(("cost.", "run.time_horizon_s"))]
    ov += ["cost.rollout=linear", "cost.rollout_knobs.a=0.015625", "cost.rollout_knobs.p=0.00006103515625",
           "cost.rollout_knobs.kv_tokens=100000", "cost.training=constant", "cost.training_knobs.a=1.0",
           "cost.weight_sync=fixed", "cost.weight_sync_knobs.publish_s=0.5"]
    if "deployment.rollout.tp=2" in ov:
        ov.append("cost.rollout_knobs.fitted_for.tp=2")
    got = prepare(ov)
    if isinstance(got, str):
        return None
    try:
        lower(*got)
    except (FastPathUnsupported, FastPathNoProgress):
        return None
    keys = list(AXES)
    axes = [str(k) for k in rng.choice(keys, size=2, replace=False)]
    grid = [f"{k}={','.join(str(v) for v in AXES[k](rng))}" for k in axes]
    base = [o for o in ov if o.partition("=")[0] not in axes]
    return base, grid


def run_sweeps(seeds: list[int], groups: int, n: int) -> dict:
    """`srl-sweep`'s grid mode (`run_sweep`, what the CLI calls) on the fast path and on SimPy: every point's row
    (engine, status, the step metrics) must be the same."""
    from simrl_explore.space import grid_space
    from simrl_explore.sweep import run_sweep

    out = {"sweeps": 0, "points": 0, "compared": 0, "mismatch": [], "crash": []}
    for s in seeds:
        drawn = sweep_case(s, groups, n)
        if drawn is None:
            continue
        base, grid = drawn
        out["sweeps"] += 1
        import attrs

        space = attrs.evolve(grid_space(base, grid), surrogate="off", top_k=0)
        try:
            fast = run_sweep(space, jobs=1, engine="auto")
            slow = run_sweep(space, jobs=1, engine="simpy")
        except Exception as exc:  # noqa: BLE001
            out["crash"].append((s, "run_sweep", f"{type(exc).__name__}: {exc}"[:300], base + grid))
            continue
        for a, b in zip(fast.rows, slow.rows, strict=True):
            out["points"] += 1
            if a.get("engine") != "fast":
                continue
            out["compared"] += 1
            diff = {k: (a[k], b.get(k)) for k in a if k in b and k not in ("engine", "fallback")
                    and not (a[k] == b.get(k) or (a[k] != a[k] and b.get(k) != b.get(k)))}
            if diff or a.get("status") != b.get("status"):
                out["mismatch"].append((s, f"point {a['point']}: {dict(list(diff.items())[:4])}", base + grid))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0:40", help="start:stop or a comma-separated list")
    ap.add_argument("--batch", type=int, default=40, help="cases per fast-path batch (one compile each)")
    ap.add_argument("--groups", type=int, default=6, help="workload.groups of every case")
    ap.add_argument("--n", type=int, default=4, help="workload.group_size of every case")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="srl-sweep grids (run_sweep) on both engines instead")
    args = ap.parse_args(argv)
    if ":" in args.seeds:
        lo, hi = (int(x) for x in args.seeds.split(":"))
        seeds = list(range(lo, hi))
    else:
        seeds = [int(x) for x in args.seeds.split(",")]
    tot: dict = {}
    t0 = time.process_time()
    for b in range(0, len(seeds), args.batch):
        r = (run_sweeps(seeds[b:b + args.batch], args.groups, args.n) if args.sweep
             else run_batch(seeds[b:b + args.batch], args.groups, args.n, args.verbose))
        for k, v in r.items():
            if isinstance(v, int):
                tot[k] = tot.get(k, 0) + v
            elif isinstance(v, list):
                tot.setdefault(k, []).extend(v)
            else:
                for kk, vv in v.items():
                    tot.setdefault(k, {})[kk] = tot.get(k, {}).get(kk, 0) + vv
        print({k: (len(v) if isinstance(v, list) else v) for k, v in tot.items() if k != "refusals"},
              f"{time.process_time() - t0:.0f} s CPU", flush=True)
    for why, c in sorted(tot.get("refusals", {}).items(), key=lambda x: -x[1]):
        print(f"  refused x{c}: {why}")
    for s, why, ov in tot.get("mismatch", []):
        print(f"MISMATCH seed {s}: {why}\n   {' '.join(ov)}")
    for s, where, why, ov in tot.get("crash", []):
        print(f"CRASH seed {s} ({where}): {why}\n   {' '.join(ov)}")
    print(f"mismatches: {len(tot.get('mismatch', []))}, crashes: {len(tot.get('crash', []))} "
          f"of {tot.get('cases', 0)} cases ({tot.get('compared', 0)} compared)")
    return 1 if tot.get("mismatch") or tot.get("crash") else 0


if __name__ == "__main__":
    sys.exit(main())
