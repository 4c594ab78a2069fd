"""What `srl-research` writes: report.md (the written answer), research.{html,png}, runs.csv."""

from __future__ import annotations

import math
import os

from simrl.atomic import atomic_write
from simrl_explore.output import table_text


def _pct(x) -> str:
    return "n/a" if not (isinstance(x, int | float) and math.isfinite(x)) else f"{x:+.1%}"


def answer(state) -> list[str]:
    """The written answer for the first validated proposal (the stated candidate when there is one)."""
    st = state.study
    if not state.lessons:
        return ["No proposal was validated."]
    ls = state.lessons[0]
    c = ls["conditions"]
    o = ls["evidence"]["overall"]
    cand, base = ls["candidate"]["name"], ls["baseline"]["name"]
    verdict = {"better": f"**Yes**: {cand} is better than {base}", "worse": f"**No**: {cand} is worse than {base}",
               "inconclusive": f"**Not overall**: {cand} vs {base} is inconclusive"}[o["verdict"]]
    lines = [f"{verdict} on {st.objective} over all variations and seeds: mean improvement {_pct(o['mean'])} "
             f"({st.confidence:.0%} {st.interval} interval {_pct(o['low'])}..{_pct(o['high'])}, "
             f"{o['n']} paired runs).", ""]
    var = c["variable"]
    if c["better"]:
        lines.append(f"- {cand} is better (interval above 0) for {var} in " + ", ".join(f"[{a}, {b}]" for a, b in c["better"]) + ".")
    if c["worse"]:
        lines.append(f"- {cand} is worse (interval below 0) for {var} in " + ", ".join(f"[{a}, {b}]" for a, b in c["worse"]) + ".")
    if c.get("flip_at") is not None:
        lines.append(f"- **The answer flips at {var} ~ {c['flip_at']:.2f}** (where the mean improvement crosses 0, "
                     "interpolated between the neighbouring variations).")
    else:
        lines.append(f"- The mean improvement does not change sign over {var} = {c['values'][0]}..{c['values'][-1]}.")
    for ch in c.get("verdict_changes", []):
        lines.append(f"- **The verdict flips between {var} = {ch['between'][0]} and {ch['between'][1]}**: "
                     f"{cand} is {ch['from']} at {ch['between'][0]}, {ch['to']} at {ch['between'][1]} "
                     f"({st.confidence:.0%} interval).")
    return lines


def write_report(state, out: str) -> list[str]:
    st = state.study
    files = []
    lines = [f"# srl-research: {st.name}", "", f"Question: {st.question}", "", "## Answer", "", *answer(state), "",
             "## Setup", "", f"- baseline: `{st.baseline.label()}`; family `{st.family}`; objective `{st.objective}` "
             f"({st.direction}imise; improvement = relative change, positive = better)",
             f"- seeds {list(st.seeds)} (each seed one workload draw, shared by baseline and candidate: paired)",
             f"- variation `{st.variation.key or st.variation.name}` = {list(st.variation.values)}",
             "- engine: SimPy (the oracle) for every run; base overrides: " + " ".join(f"`{o}`" for o in st.base_set),
             "", "## Proposals", ""]
    for p in state.proposals:
        v = next((x for x in state.validations if x.proposal == p.index), None)
        if p.strategy is None:
            lines.append(f"{p.index}. [{p.source}] rejected: {p.rejected}")
            continue
        lines.append(f"{p.index}. [{p.source}] `{p.strategy.label()}`: overall {_pct(v.overall['mean'])} "
                     f"({_pct(v.overall['low'])}..{_pct(v.overall['high'])}, {v.overall['verdict']})"
                     + (f"; {p.rationale}" if p.rationale else ""))
    lines += ["", "## Evidence (first proposal)", ""]
    if state.validations:
        lines += [f"| {st.variation.key or st.variation.name} | n | mean | low | high | verdict |",
                  "|---|---|---|---|---|---|"]
        for r in state.validations[0].per_variation:
            lines.append(f"| {r['value']} | {r['n']} | {_pct(r['mean'])} | {_pct(r['low'])} | {_pct(r['high'])} | "
                         f"{r['verdict']} |")
    lines += ["", "Lessons: lessons.jsonl / lessons.md (appended; read by later proposals). Plot: research.png. "
              "Every run: runs.csv.", ""]
    atomic_write(os.path.join(out, "report.md"), "\n".join(lines))
    files.append("report.md")
    runs = []
    for v in state.validations:
        p = state.proposals[v.proposal]
        runs += [{"proposal": v.proposal, "strategy": p.strategy.label(), **r} for r in v.runs]
    if runs:
        atomic_write(os.path.join(out, "runs.csv"), table_text(runs, list(runs[0])))
        files.append("runs.csv")
    files += _plot(state, out)
    return files


def _plot(state, out: str) -> list[str]:
    import altair as alt

    st = state.study
    var = st.variation.key or st.variation.name
    recs = []
    for v in state.validations:
        p = state.proposals[v.proposal]
        for r in v.per_variation:
            if all(isinstance(r[k], int | float) and math.isfinite(r[k]) for k in ("mean", "low", "high")) \
                    and isinstance(r["value"], int | float):
                recs.append({var: r["value"], "mean": r["mean"], "low": r["low"], "high": r["high"],
                             "strategy": f"{v.proposal}: {p.strategy.label()}"})
    if not recs:
        return []
    data = alt.Data(values=recs)
    x = alt.X(f"{var}:Q", title=var)
    band = alt.Chart(data).mark_area(opacity=0.2).encode(x=x, y=alt.Y("low:Q", axis=alt.Axis(format="%")), y2="high:Q",
                                                          color=alt.Color("strategy:N", legend=alt.Legend(orient="bottom", columns=1, labelLimit=700)))
    line = alt.Chart(data).mark_line(point=True).encode(
        x=x, y=alt.Y("mean:Q", title=f"{st.objective}: improvement vs {st.baseline.name}", axis=alt.Axis(format="%")),
        color="strategy:N", tooltip=[f"{var}:Q", "mean:Q", "low:Q", "high:Q", "strategy:N"])
    zero = alt.Chart(alt.Data(values=[{"y": 0}])).mark_rule(color="black").encode(y="y:Q")
    layers = [band, line, zero]
    if state.lessons and state.lessons[0]["conditions"].get("flip_at") is not None:
        f = state.lessons[0]["conditions"]["flip_at"]
        layers.append(alt.Chart(alt.Data(values=[{"x": f, "label": f"flip ~ {f:.2f}"}])).mark_rule(
            strokeDash=[5, 3], color="red").encode(x="x:Q"))
        layers.append(alt.Chart(alt.Data(values=[{"x": f, "label": f"flip ~ {f:.2f}"}])).mark_text(
            align="left", dx=4, dy=-110, color="red").encode(x="x:Q", text="label:N"))
    import textwrap

    chart = alt.layer(*layers).properties(width=560, height=300, title=textwrap.wrap(st.question, 90))
    atomic_write(os.path.join(out, "research.html"), chart.to_html())
    files = ["research.html"]
    try:
        import vl_convert as vlc

        atomic_write(os.path.join(out, "research.png"), vlc.vegalite_to_png(chart.to_json(), scale=1.5))
        files.append("research.png")
    except ImportError:
        pass
    return files
