"""Published end-to-end RL results against the simulator: the fidelity benchmark.

Run: ``.venv/bin/python benchmarks/fidelity.py [--cards DIR] [--only ID ...] [--json PATH|-]``.

Each card in ``benchmarks/fidelity_cards/*.yaml`` is one published result of a real system (verl,
NeMo-RL, AReaL ...): its source (repository, commit, file, table), the published settings, the
published step times of two or more runs (e.g. colocated sync and fully async) and the ratios
between them (async/sync speedup, GPU scaling, a staleness sweep), and how the settings map to
a SimRL configuration: ``srl``-style overrides shared by every run plus each run's own. The
script builds each configuration exactly as ``srl`` does (``simrl.config.load_config`` with the
overrides), simulates it (``simrl.engine.sim.build_simulation`` / ``summarise``), takes the
mean step time after the card's warm-up steps, and prints one table of published vs simulated
step times and ratios with the relative error, then the medians of |relative error| for ratios
and for absolute step times. ``--json`` writes the same rows for machines
(no wall-clock times in it, so the same cards give a byte-identical file).

Nothing here is fitted to a card. The cost models run at their defaults (roofline rollout from
the GPU catalog's datasheet figures, analytical training at its default MFU and communication
efficiencies, NCCL weight sync at its default bandwidth rule); no card sets a cost knob other than
the parallel layout and the trainer's upstream options (Ulysses SP, dynamic batch size, old-log-prob
recompute, reference model). The only numbers a card derives from its source beyond the settings
are response lengths: where the source publishes an average sequence length (NeMo-RL), the
``rl_math`` generator's completion quantiles are scaled by one factor so that the workload's mean
prompt + completion equals it (``lengths.mean_sequence_tokens``); where it does not, the card uses
the ``rl_math`` defaults capped at the published response limit and says so.

A benchmark, not a test: it asserts nothing. Exit status 0 unless a card fails to load or run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simrl.strictio import YamlInputError, load_yaml_file  # noqa: E402

CARDS_DIR = Path(__file__).resolve().parent / "fidelity_cards"
CARD_KEYS = {"id", "system", "title", "source", "published", "mapping", "missing"}
SOURCE_KEYS = {"repo", "commit", "file", "section", "url", "settings_from", "notes"}
PUBLISHED_KEYS = {"settings", "step_time_s", "ratios", "notes"}
MAPPING_KEYS = {"workload", "base", "runs", "training_steps", "warmup_steps", "lengths", "notes"}
RATIO_KEYS = {"name", "num", "den", "kind", "value", "notes"}
RATIO_KINDS = ("speedup", "scaling", "staleness")
# A published mean length a card's workload is scaled to: prompt + response (NeMo-RL's
# "G-Average Seq len") or the response alone (verl's response_length/mean, AReaL's length curves).
LENGTH_TARGETS = ("mean_sequence_tokens", "mean_response_tokens")
RUN_FIXED = ("run.plots=false", "run.telemetry=false")


class CardError(ValueError):
    """A card that cannot be used; the message names the file and the key."""


# -- loading and validation ------------------------------------------------------------------

def _need(mapping: Any, where: str, keys: set[str], required: set[str]) -> None:
    if not isinstance(mapping, dict):
        raise CardError(f"{where}: expected a mapping, got {type(mapping).__name__}")
    unknown = sorted(set(mapping) - keys)
    if unknown:
        raise CardError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(keys))}")
    missing = sorted(required - set(mapping))
    if missing:
        raise CardError(f"{where}: missing required key(s) {', '.join(missing)}")


def _positive(val: Any) -> bool:
    """A real number > 0: not a bool, not a string, finite (NaN and infinity are not figures)."""
    return isinstance(val, int | float) and not isinstance(val, bool) and math.isfinite(val) and val > 0


def _string(card: dict, key: str, where: str, optional: bool = False) -> None:
    val = card.get(key)
    if optional and val is None:
        return
    if not isinstance(val, str) or not val.strip():
        raise CardError(f"{where}.{key}: expected a non-empty string, got {val!r}")


def _overrides(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and "=" in v for v in value):
        raise CardError(f"{where}: expected a list of KEY=VALUE override strings")
    return list(value)


def validate_card(card: Any, path: Path) -> dict:
    """Check a parsed card's structure; return it. Raises CardError naming file and key."""
    name = path.name
    _need(card, name, CARD_KEYS, {"id", "system", "source", "published", "mapping", "missing"})
    if not isinstance(card["id"], str) or not card["id"]:
        raise CardError(f"{name}: id: expected a non-empty string")
    _string(card, "system", f"{name}: ")
    _string(card, "title", f"{name}: ", optional=True)
    src = card["source"]
    _need(src, f"{name}: source", SOURCE_KEYS, {"repo", "file"})
    for key in ("file", "section", "url", "notes"):
        _string(src, key, f"{name}: source", optional=key != "file")
    sf = src.get("settings_from")
    if sf is not None and (not isinstance(sf, list) or not all(isinstance(x, str) and x.strip() for x in sf)):
        raise CardError(f"{name}: source.settings_from: expected a list of 'owner/name@commit path' strings, got {sf!r}")
    if not isinstance(src["repo"], str) or "/" not in src["repo"]:
        raise CardError(f"{name}: source.repo: expected 'owner/name', got {src['repo']!r}")
    if not (src.get("commit") or src.get("url")):
        raise CardError(f"{name}: source: give a commit or a url so the figure can be found again")
    commit = src.get("commit")
    if commit is not None and not (isinstance(commit, str) and len(commit) >= 7
                                   and all(c in "0123456789abcdef" for c in commit)):
        raise CardError(f"{name}: source.commit: expected a hex commit id, got {commit!r}")
    pub = card["published"]
    _need(pub, f"{name}: published", PUBLISHED_KEYS, {"settings", "step_time_s"})
    if not isinstance(pub["settings"], dict):
        raise CardError(f"{name}: published.settings: expected a mapping of the published settings, "
                        f"got {type(pub['settings']).__name__}")
    steps = pub["step_time_s"]
    if not isinstance(steps, dict) or len(steps) < 1:
        raise CardError(f"{name}: published.step_time_s: expected a mapping run -> seconds")
    for run, val in steps.items():
        if not _positive(val):
            raise CardError(f"{name}: published.step_time_s.{run}: expected seconds > 0 (a finite number), "
                            f"got {val!r}")
    mp = card["mapping"]
    _need(mp, f"{name}: mapping", MAPPING_KEYS, {"workload", "base", "runs", "training_steps"})
    _overrides(mp["base"], f"{name}: mapping.base")
    runs = mp["runs"]
    if not isinstance(runs, dict) or not runs:
        raise CardError(f"{name}: mapping.runs: expected a mapping run -> overrides")
    for run in runs:
        _overrides(runs[run], f"{name}: mapping.runs.{run}")
    for run in steps:
        if run not in runs:
            raise CardError(f"{name}: published.step_time_s.{run}: no such run in mapping.runs "
                            f"({', '.join(runs)})")
    ts, wu = mp["training_steps"], mp.get("warmup_steps", 0)
    if type(ts) is not int or ts < 1 or type(wu) is not int or not 0 <= wu < ts:
        raise CardError(f"{name}: mapping: need integers training_steps >= 1 and 0 <= warmup_steps < "
                        f"training_steps, got {ts!r} / {wu!r}")
    lengths = mp.get("lengths")
    if lengths is not None:
        _need(lengths, f"{name}: mapping.lengths", set(LENGTH_TARGETS) | {"notes"}, set())
        given = [k for k in LENGTH_TARGETS if k in lengths]
        if len(given) != 1:
            raise CardError(f"{name}: mapping.lengths: give exactly one of {', '.join(LENGTH_TARGETS)} "
                            f"(the published mean the workload is scaled to), got {len(given)}")
        key = given[0]
        m = lengths[key]
        per_run = m if isinstance(m, dict) else {r: m for r in runs}
        for run in runs:
            val = per_run.get(run)
            if not _positive(val):
                raise CardError(f"{name}: mapping.lengths.{key}: expected tokens > 0 (one finite "
                                f"number, or one per run), got {val!r} for run {run!r}")
        unknown_runs = sorted(set(per_run) - set(runs))
        if unknown_runs:
            raise CardError(f"{name}: mapping.lengths.{key}: no such run(s) {', '.join(unknown_runs)}")
    ratios = pub.get("ratios") or []
    if not isinstance(ratios, list):
        raise CardError(f"{name}: published.ratios: expected a list of ratios, got {type(ratios).__name__}")
    for i, ratio in enumerate(ratios):
        where = f"{name}: published.ratios[{i}]"
        _need(ratio, where, RATIO_KEYS, {"name", "num", "den", "kind"})
        if "value" in ratio and not _positive(ratio["value"]):
            raise CardError(f"{where}.value: expected a ratio > 0 (a finite number), got {ratio['value']!r}")
        if ratio["kind"] not in RATIO_KINDS:
            raise CardError(f"{where}.kind: expected one of {', '.join(RATIO_KINDS)}, got {ratio['kind']!r}")
        for side in ("num", "den"):
            if ratio[side] not in runs:
                raise CardError(f"{where}.{side}: no such run {ratio[side]!r} in mapping.runs")
        if "value" not in ratio and not (ratio["num"] in steps and ratio["den"] in steps):
            raise CardError(f"{where}: give value, or published step times of both runs")
    miss = card["missing"]
    if not isinstance(miss, list) or not all(isinstance(m, str) for m in miss):
        raise CardError(f"{name}: missing: expected a list of strings (mechanisms the simulator lacks; [] if none)")
    return card


def load_cards(directory: Path = CARDS_DIR, only: list[str] | None = None) -> list[dict]:
    """Every ``*.yaml`` card in ``directory``, validated, sorted by file name."""
    cards, seen = [], set()
    for path in sorted(Path(directory).glob("*.yaml")):
        try:  # strict: duplicate keys, non-UTF-8 and NUL bytes refused, named by line
            data = load_yaml_file(path)
        except YamlInputError as exc:
            raise CardError(f"{path.name}:{exc.line}: {exc.message}" if exc.line else f"{path.name}: {exc.message}") \
                from None
        card = validate_card(data, path)
        check_runs(card, path)
        if card["id"] in seen:
            raise CardError(f"{path.name}: id {card['id']!r} used by another card")
        seen.add(card["id"])
        card["_file"] = path.name
        if only is None or card["id"] in only:
            cards.append(card)
    if only:
        unknown = sorted(set(only) - {c["id"] for c in cards})
        if unknown:
            raise CardError(f"--only: no card with id {', '.join(unknown)}")
    return cards


# -- configuration ---------------------------------------------------------------------------

def check_runs(card: dict, path: Path) -> None:
    """Every run's overrides make a valid configuration and cost models (`srl`'s own checks),
    before anything is simulated: a typo in a card is a CardError naming the file and run."""
    from simrl.config import ConfigError, load_config
    from simrl.cost.base import CostModelError
    from simrl.cost.build import build_costs

    for run in card["mapping"]["runs"]:
        try:
            build_costs(load_config(None, run_overrides(card, run)))
        except (ConfigError, CostModelError, ValueError) as exc:
            raise CardError(f"{path.name}: mapping.runs.{run} (with mapping.base): {exc}") from None


def run_overrides(card: dict, run: str) -> list[str]:
    """The override list of one run: fixed output switches, the card's base, the run's own."""
    mp = card["mapping"]
    return [*RUN_FIXED, f"run.training_steps={mp['training_steps']}", *mp["base"], *mp["runs"][run]]


def length_scale_overrides(card: dict, run: str) -> list[str]:
    """Scale ``rl_math``'s completion quantiles so the workload's mean prompt + completion
    (``mean_sequence_tokens``) or mean completion (``mean_response_tokens``) matches the published
    mean (bisection on one factor; the cap stays the card's ``max_completion`` / ``max_model_len``).
    Returns the extra override, or [] when not asked."""
    lengths = card["mapping"].get("lengths")
    if not lengths:
        return []
    from simrl.config import load_config
    from simrl.engine.sim import load_workload
    from workloads.registry import generator_spec

    key = next(k for k in LENGTH_TARGETS if k in lengths)
    m = lengths[key]
    target = float(m[run] if isinstance(m, dict) else m)
    with_prompt = key == "mean_sequence_tokens"
    base_ovr = run_overrides(card, run)
    cfg = load_config(None, base_ovr)
    if cfg.workload.generator != "rl_math":
        raise CardError(f"{card['_file']}: mapping.lengths needs workload.generator=rl_math")
    knots = cfg.workload.knobs.get("completion_knots") or generator_spec("rl_math").knobs["completion_knots"]

    def mean_for(scale: float) -> tuple[float, str]:
        scaled = [[p, max(1, round(x * scale))] for p, x in knots]
        ovr = "workload.knobs.completion_knots=" + json.dumps(scaled)
        w = load_workload(load_config(None, [*base_ovr, ovr]))
        last = w.traj_call_start[1:] - 1
        total = w.call_completion_tokens[last] + (w.call_prompt_tokens[last] if with_prompt else 0)
        return float(total.mean()), ovr

    lo, hi = 0.05, 20.0
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        if mean_for(mid)[0] < target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.001:
            break
    return [mean_for((lo * hi) ** 0.5)[1]]


def build_config(card: dict, run: str):
    """The SimConfig of one run of a card (what `srl` would build from the same overrides)."""
    from simrl.config import load_config

    ovr = run_overrides(card, run)
    return load_config(None, [*ovr, *length_scale_overrides(card, run)])


# -- simulation ------------------------------------------------------------------------------

def simulate_run(card: dict, run: str, cache: dict | None = None) -> dict:
    """Simulate one run; mean step time over the steps after the card's warm-up."""
    from simrl.engine.sim import build_simulation, summarise

    cfg = build_config(card, run)
    key = repr(cfg)
    if cache is not None and key in cache:
        return cache[key]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # out-of-domain queries are counted in the report
        sim = build_simulation(cfg)
        sim.run()
        report = summarise(sim)
    wall = time.perf_counter() - t0
    warm = card["mapping"].get("warmup_steps", 0)
    steps = report.steps[warm:]
    if not steps or report.diagnosis:
        raise RuntimeError(f"{card['_file']}: run {run!r} did not finish its steps: {report.diagnosis}")
    mean_step = sum(s.step_time for s in steps) / len(steps)
    wl = report.workload
    out = {
        "step_time_s": mean_step,
        "steps_measured": len(steps),
        "train_s": sum(s.train_end - s.train_start for s in steps) / len(steps),
        "staleness_mean": report.totals["staleness_mean"],
        "domain_warnings": len(report.domain_warnings),
        "workload_groups": wl.get("groups"),
        "wall_s": wall,
    }
    if cache is not None:
        cache[key] = out
    return out


def rel_err(sim: float, pub: float) -> float:
    return (sim - pub) / pub


def evaluate(cards: list[dict], progress=None) -> dict:
    """Simulate every run of every card; rows for step times and ratios, and the medians."""
    cache: dict = {}
    step_rows, ratio_rows = [], []
    for card in cards:
        sims = {}
        for run in card["mapping"]["runs"]:
            if progress:
                progress(f"{card['id']}: {run}")
            sims[run] = simulate_run(card, run, cache)
            if progress:
                progress(f"{card['id']}: {run} done in {sims[run]['wall_s']:.1f} s of wall time")
        pub_steps = card["published"]["step_time_s"]
        for run, pub in pub_steps.items():
            s = sims[run]["step_time_s"]
            step_rows.append({"card": card["id"], "system": card["system"], "run": run, "published_s": pub,
                              "simulated_s": s, "rel_err": rel_err(s, pub),
                              "train_s": sims[run]["train_s"], "domain_warnings": sims[run]["domain_warnings"]})
        for ratio in card["published"].get("ratios") or []:
            num, den = ratio["num"], ratio["den"]
            pub = ratio.get("value")
            if pub is None:
                pub = pub_steps[num] / pub_steps[den]
            s = sims[num]["step_time_s"] / sims[den]["step_time_s"]
            ratio_rows.append({"card": card["id"], "system": card["system"], "ratio": ratio["name"],
                               "kind": ratio["kind"], "num": num, "den": den, "published": pub,
                               "simulated": s, "rel_err": rel_err(s, pub)})
    med = {
        "ratios_abs_rel_err": statistics.median(abs(r["rel_err"]) for r in ratio_rows) if ratio_rows else None,
        "step_times_abs_rel_err": statistics.median(abs(r["rel_err"]) for r in step_rows) if step_rows else None,
        "ratios_signed_rel_err": statistics.median(r["rel_err"] for r in ratio_rows) if ratio_rows else None,
        "step_times_signed_rel_err": statistics.median(r["rel_err"] for r in step_rows) if step_rows else None,
    }
    missing = {c["id"]: c["missing"] for c in cards}
    return {"schema": "simrl.fidelity/1", "cards": [c["id"] for c in cards], "step_times": step_rows,
            "ratios": ratio_rows, "medians": med, "missing_mechanisms": missing,
            "calibration": "no constant fitted to any card; cost models at their defaults (GPU datasheet figures, analytical MFU 0.4, "
                           "comm efficiency 0.7, NCCL weight sync defaults); one weight-sync constant "
                           "(host_s_per_engine_param, per-tensor sync) set from verl's dense 7B sync time "
                           "(0.12 s), which is not a card; one eager-mode constant (eager_launch_s, vLLM "
                           "enforce_eager only) from a published dense 7B eager-vs-graph measurement, not a card; "
                           "one MoE-training constant (moe_alltoall_efficiency, the alltoall dispatcher's EP "
                           "exchange, MoE models only) from Megatron-Bridge's published DGX-B200 Qwen3-30B-A3B "
                           "MBS-1 pretraining row, not a card; "
                           "one in-process-engine constant (inprocess_s_per_seq, 20 us of serial host time per "
                           "sequence per iteration, engines with engine_core=inprocess only) from vLLM PR 10241's "
                           "published multiprocess-vs-in-process V1 throughput A/B, not a card; "
                           "one rollout-engine constant (overhead_per_seq_s, 30 us of engine time per decoding "
                           "sequence per iteration, every roofline rollout) fitted to ML.ENERGY's published "
                           "dense large-batch decode rows (Qwen3-32B, vLLM v0.11.1, 1 x B200 and 2 x H100 TP 2, "
                           "median inter-token latency), not a card"}


def render(result: dict) -> str:
    lines = ["Step times (mean per step after warm-up; seconds)",
             f"{'card':<34} {'run':<14} {'published':>10} {'simulated':>10} {'error':>8} {'sim train':>10}  ood"]
    for r in result["step_times"]:
        lines.append(f"{r['card']:<34} {r['run']:<14} {r['published_s']:>10.1f} {r['simulated_s']:>10.1f} "
                     f"{r['rel_err']:>+7.0%} {r['train_s']:>10.1f}  {r['domain_warnings']}")
    lines += ["", "Ratios (step time of num / step time of den)",
              f"{'card':<34} {'ratio':<30} {'kind':<9} {'published':>9} {'simulated':>9} {'error':>8}"]
    for r in result["ratios"]:
        lines.append(f"{r['card']:<34} {r['ratio']:<30} {r['kind']:<9} {r['published']:>9.2f} "
                     f"{r['simulated']:>9.2f} {r['rel_err']:>+7.0%}")
    m = result["medians"]

    def pct(x):
        return "n/a" if x is None else f"{x:.1%}"

    lines += ["",
              f"median |relative error|: ratios {pct(m['ratios_abs_rel_err'])} "
              f"({len(result['ratios'])} ratios), absolute step times {pct(m['step_times_abs_rel_err'])} "
              f"({len(result['step_times'])} step times)",
              f"median signed error:     ratios {pct(m['ratios_signed_rel_err'])}, "
              f"step times {pct(m['step_times_signed_rel_err'])}",
              f"calibrated: {result['calibration']}",
              "sim train = simulated seconds of training per step; ood = cost-model queries outside the "
              "model's validity domain (counted in the run report)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cards", type=Path, default=CARDS_DIR, help="directory of card YAML files")
    ap.add_argument("--only", nargs="+", metavar="ID", help="run only these card ids")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON (- for stdout only)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    if not args.cards.is_dir():
        print(f"error: --cards {args.cards}: not a directory of card YAML files", file=sys.stderr)
        return 2
    if args.json and args.json != "-":
        out = Path(args.json)
        if out.is_dir() or not out.parent.is_dir():
            print(f"error: --json {args.json}: expected a file path in an existing directory", file=sys.stderr)
            return 2
    try:
        cards = load_cards(args.cards, args.only)
    except CardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not cards:
        print(f"error: --cards {args.cards}: no *.yaml cards", file=sys.stderr)
        return 2
    progress = None if args.quiet else (lambda msg: print(f"simulating {msg}", file=sys.stderr, flush=True))
    try:
        result = evaluate(cards, progress)
    except (CardError, RuntimeError) as exc:  # a run that cannot be simulated (named by its card)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json == "-":
        print(json.dumps(result, indent=1, sort_keys=True))
        return 0
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
