"""Holding a simulation against a real run, step by step (what `srl-compare` computes).

Both sides are `RealRun`s (a simulated run is converted with `simrl.realrun.from_sim_run`), so
the comparison is symmetric in form. Per step: step time, generated and trained tokens/s, mean
staleness, and the three phases (waiting for a batch = rollout-bound, training, weight sync).
Errors are sim - real; percentage errors are relative to the real run. The step-time error is
attributed to the phase with the largest absolute difference. Results are plain dicts, rounded
like every written number, so ``--json`` output is stable.
"""

from __future__ import annotations

import statistics
from typing import Any

from simrl.realrun import RealRun, RealStep
from simrl.report import _round

PHASES = {"wait": "waiting for a batch (rollout-bound)", "train": "training", "sync": "weight sync"}
RATES = ("step_time_s", "generated_tokens_per_s", "trained_tokens_per_s")


class CompareError(ValueError):
    """The two runs cannot be aligned (different step ranges, no common steps)."""


def _ape(sim: float, real: float) -> float | None:
    """Absolute percentage error, relative to the real value; None when undefined (real = 0)."""
    if real == 0:
        return 0.0 if sim == 0 else None
    return abs(sim - real) / abs(real) * 100.0


def _metrics(s: RealStep) -> dict[str, float | None]:
    dt = s.step_time
    return {
        "step_time_s": dt,
        "generated_tokens_per_s": s.generated_tokens / dt if dt > 0 else 0.0,
        "trained_tokens_per_s": s.trained_tokens / dt if dt > 0 else 0.0,
        "staleness_mean": s.staleness_mean,
        "wait": s.wait_s, "train": s.train_s, "sync": s.sync_s,
    }


def align(sim: RealRun, real: RealRun, allow_partial: bool = False) -> list[tuple[RealStep, RealStep]]:
    """Pairs of steps with the same number; different step ranges are an error unless allowed."""
    a = {s.step: s for s in sim.steps}
    b = {s.step: s for s in real.steps}
    common = sorted(set(a) & set(b))
    rng = lambda steps: f"{steps[0].step}..{steps[-1].step} ({len(steps)} steps)"  # noqa: E731
    if not common:
        raise CompareError(f"no common training steps: SIM has steps {rng(sim.steps)}, REAL has {rng(real.steps)}")
    if set(a) != set(b) and not allow_partial:
        raise CompareError(f"different step counts: SIM has steps {rng(sim.steps)}, REAL has {rng(real.steps)}; "
                           f"pass --allow-partial to compare the common steps {common[0]}..{common[-1]} only")
    return [(a[k], b[k]) for k in common]


def _summary(values: list[float | None]) -> dict[str, Any]:
    vals = [v for v in values if v is not None]
    out: dict[str, Any] = {"median": None, "mean": None, "max": None}
    if vals:
        out = {"median": statistics.median(vals), "mean": statistics.fmean(vals), "max": max(vals)}
    if len(vals) < len(values):
        out["undefined_steps"] = len(values) - len(vals)  # real value 0: no percentage error
    return out


def compare(sim: RealRun, real: RealRun, allow_partial: bool = False) -> dict[str, Any]:
    """Per-step errors, their summary and where the disagreement is; a JSON-ready dict."""
    pairs = align(sim, real, allow_partial)
    rows = []
    for s, r in pairs:
        ms, mr = _metrics(s), _metrics(r)
        row: dict[str, Any] = {"step": s.step}
        for k in RATES:
            row[k] = {"sim": ms[k], "real": mr[k], "error": ms[k] - mr[k], "ape_pct": _ape(ms[k], mr[k])}
        if ms["staleness_mean"] is not None and mr["staleness_mean"] is not None:
            row["staleness_mean"] = {"sim": ms["staleness_mean"], "real": mr["staleness_mean"],
                                     "error": ms["staleness_mean"] - mr["staleness_mean"]}
        else:
            row["staleness_mean"] = None
        row["phases_s"] = {p: {"sim": ms[p], "real": mr[p], "error": ms[p] - mr[p]} for p in PHASES}
        worst = max(PHASES, key=lambda p: (abs(row["phases_s"][p]["error"]), -list(PHASES).index(p)))
        row["largest_phase"] = PHASES[worst] if abs(row["phases_s"][worst]["error"]) > 0 else None
        rows.append(row)
    summary: dict[str, Any] = {f"{k}_ape_pct": _summary([r[k]["ape_pct"] for r in rows]) for k in RATES}
    stale = [abs(r["staleness_mean"]["error"]) for r in rows if r["staleness_mean"] is not None]
    summary["staleness_mean_abs_error"] = _summary(stale) if stale else None
    return _round({
        "sim": _side(sim), "real": _side(real),
        "steps_compared": [pairs[0][0].step, pairs[-1][0].step], "partial": len(pairs) < max(len(sim.steps),
                                                                                               len(real.steps)),
        "steps": rows, "summary": summary, "attribution": attribute(rows),
    })


def _side(run: RealRun) -> dict[str, Any]:
    from simrl.realrun.convert import model_label

    model = model_label(run.model)
    label = f"{run.system}, {model}" if model else run.system
    return {"system": run.system, "model": model, "source": run.source, "steps": len(run.steps), "label": label}


def attribute(rows: list[dict]) -> dict[str, Any]:
    """Where the step-time disagreement lives: summed |phase error| per phase, and a verdict."""
    total = {p: sum(abs(r["phases_s"][p]["error"]) for r in rows) for p in PHASES}
    signed = {p: statistics.fmean(r["phases_s"][p]["error"] for r in rows) for p in PHASES}
    whole = sum(total.values())
    phases = {PHASES[p]: {"abs_error_s": total[p], "share": total[p] / whole if whole else 0.0,
                          "mean_error_s": signed[p]} for p in PHASES}
    if whole == 0:
        return {"phases": phases, "dominant": None,
                "verdict": "no disagreement: every compared step has the same phase durations"}
    dom = max(PHASES, key=lambda p: (total[p], -list(PHASES).index(p)))
    more = "longer" if signed[dom] > 0 else "shorter"
    verdict = (f"most of the step-time disagreement is in {PHASES[dom]}: {total[dom] / whole:.0%} of the summed "
               f"absolute phase errors; the simulation's {PHASES[dom].split(' (')[0]} is "
               f"{abs(signed[dom]):.3g} s {more} per step on average")
    return {"phases": phases, "dominant": PHASES[dom], "verdict": verdict}


def render_text(result: dict[str, Any]) -> str:
    """A fixed-width table of the per-step errors, the summary and the verdict."""
    def f(v, spec):
        return "n/a" if v is None else format(v, spec)

    sim, real = result["sim"], result["real"]
    lines = [f"sim:  {sim['source'] or '-'} ({sim['system']}, {sim['model'] or 'model ?'}), {sim['steps']} steps",
             f"real: {real['source'] or '-'} ({real['system']}, {real['model'] or 'model ?'}), {real['steps']} steps",
             f"compared steps {result['steps_compared'][0]}..{result['steps_compared'][1]}"
             + (" (partial: common steps only)" if result["partial"] else ""), "",
             "  ".join([f"{'step':>4}", f"{'step time s sim/real':>21} {'err%':>7}",
                        f"{'gen tok/s sim/real':>19} {'err%':>7}", f"{'trained tok/s sim/real':>22} {'err%':>7}",
                        f"{'stale sim/real':>14}", "largest phase error"])]
    for r in result["steps"]:
        st = r["staleness_mean"]
        m = r[RATES[0]]
        cells = [f"{r['step']:>4}", f"{m['sim']:>10.3f}/{m['real']:<10.3f} {f(m['ape_pct'], '7.2f'):>7}"]
        for k, w in ((RATES[1], 9), (RATES[2], 11)):
            m = r[k]
            cells.append(f"{m['sim']:>{w}.0f}/{m['real']:<9.0f} {f(m['ape_pct'], '7.2f'):>7}")
        cells.append(f"{st['sim']:>7.2f}/{st['real']:<6.2f}" if st else f"{'n/a':>14}")
        cells.append(r["largest_phase"] or "-")
        lines.append("  ".join(cells))
    lines += ["", "absolute percentage error   median     mean      max"]
    names = {"step_time_s": "step time", "generated_tokens_per_s": "generated tokens/s",
             "trained_tokens_per_s": "trained tokens/s"}
    for k in RATES:
        s = result["summary"][f"{k}_ape_pct"]
        lines.append(f"  {names[k]:<24} {f(s['median'], '7.2f'):>7}% {f(s['mean'], '7.2f'):>7}% {f(s['max'], '7.2f'):>7}%")
    s = result["summary"]["staleness_mean_abs_error"]
    lines.append("  staleness mean (abs diff)  " + (f"{s['median']:>7.3f}  {s['mean']:>7.3f}  {s['max']:>7.3f}" if s
                                                      else "n/a (one side has no staleness)"))
    lines += ["", "where the step-time disagreement is (summed |sim - real| per phase):"]
    for name, p in result["attribution"]["phases"].items():
        lines.append(f"  {name:<38} {p['abs_error_s']:>10.3f} s  {p['share']:>6.1%}  (mean {p['mean_error_s']:+.3f} s/step)")
    lines.append(result["attribution"]["verdict"])
    return "\n".join(lines)
