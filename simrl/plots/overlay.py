"""Overlay plots of a comparison (`srl-compare --plots`): sim and real, step by step.

Three views, from the dict `simrl.compare.compare` returns: step time, throughput (generated
and trained tokens/s) and the phase breakdown side by side. Rendered like the run plots.
"""

from __future__ import annotations

from pathlib import Path

from simrl.plots.charts import STATE_COLORS, Datasets, _alt

PHASE_LABELS = {"wait": "waiting for a batch", "train": "training", "sync": "weight sync"}


def _title(text: str, result: dict, sub: str):
    return _alt().TitleParams(text=text, subtitle=[
        _side_label("sim", result["sim"]), _side_label("real", result["real"]), sub])


def _side_label(which: str, side: dict) -> str:
    """``sim: bounded_async, qwen3-8b (outputs/run)``: system and model, then where it came from."""
    label = side.get("label") or side["system"]
    return f"{which}: {label}" + (f" ({side['source']})" if side.get("source") else "")


def step_time(ds: Datasets, result: dict):
    alt = _alt()
    rows = [{"step": r["step"], "run": side, "s": r["step_time_s"][side]}
            for r in result["steps"] for side in ("sim", "real")]
    return alt.Chart(ds(rows)).mark_line(point=True).encode(
        x=alt.X("step:O", title="training step", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("s:Q", title="step time (s)"),
        color=alt.Color("run:N", title="run", sort=["sim", "real"], scale=alt.Scale(range=["#1f77b4", "#d62728"])),
    ).properties(width=max(360, 40 * len(result["steps"])), height=260,
                 title=_title("Step time: simulation vs real run", result, "step = publish_end(k-1)..publish_end(k)"))


def throughput(ds: Datasets, result: dict):
    alt = _alt()
    rows = [{"step": r["step"], "run": side, "tokens": name, "v": r[key][side]}
            for r in result["steps"] for side in ("sim", "real")
            for name, key in (("generated", "generated_tokens_per_s"), ("trained", "trained_tokens_per_s"))]
    # No point markers: they would turn the dash legend into dots.
    return alt.Chart(ds(rows)).mark_line(strokeWidth=2.5).encode(
        x=alt.X("step:O", title="training step", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("v:Q", title="tokens/s"),
        color=alt.Color("tokens:N", title="tokens", scale=alt.Scale(range=["#2ca02c", "#1f77b4"])),
        strokeDash=alt.StrokeDash("run:N", title="run", sort=["sim", "real"],
                                  legend=alt.Legend(symbolStrokeColor="#333333")),
    ).properties(width=max(360, 40 * len(result["steps"])), height=260,
                 title=_title("Throughput: simulation vs real run", result, "solid: sim, dashed: real"))


def phases(ds: Datasets, result: dict):
    alt = _alt()
    order = list(PHASE_LABELS.values())
    rows = [{"step": r["step"], "run": side, "phase": PHASE_LABELS[p], "order": i, "s": r["phases_s"][p][side]}
            for r in result["steps"] for side in ("sim", "real") for i, p in enumerate(PHASE_LABELS)]
    return alt.Chart(ds(rows)).mark_bar().encode(
        x=alt.X("step:O", title="training step (left bar: sim, right bar: real)", axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("run:N", sort=["sim", "real"]),
        y=alt.Y("s:Q", title="seconds", stack="zero"),
        color=alt.Color("phase:N", title="phase", sort=order,
                        scale=alt.Scale(domain=order, range=[STATE_COLORS[p] for p in order])),
        order=alt.Order("order:Q"),
    ).properties(width=max(360, 60 * len(result["steps"])), height=280,
                 title=_title("Step phases: simulation vs real run", result, _phase_note(result)))


def _phase_note(result: dict) -> str:
    dom = result["attribution"]["dominant"]
    return f"largest disagreement: {dom}" if dom else "no disagreement"


VIEWS = {"compare_step_time": step_time, "compare_throughput": throughput, "compare_phases": phases}


def write_overlay_plots(result: dict, out_dir: str | Path) -> list[Path]:
    from simrl.plots.render import render

    paths: list[Path] = []
    for name, build in VIEWS.items():
        ds = Datasets()
        paths += render(build(ds, result), Path(out_dir), name, ds.values)
    return paths
