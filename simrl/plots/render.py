"""Rendering a chart to PNG and HTML, deterministically and atomically.

The Vega-Lite spec is serialised with sorted keys and rendered by vl-convert (no browser),
with a fixed font, scale and background, so the same data give byte-identical files on the
same machine (same fonts, same vl-convert). Files are written through `atomic_write`.
"""

from __future__ import annotations

import json
from pathlib import Path

from simrl.atomic import atomic_write

FONT = "DejaVu Sans"  # fixed, so text metrics do not depend on a fallback chain
SCALE = 1.5  # PNG pixels per CSS pixel: crisp without megabyte files


def spec_json(chart, datasets: dict[str, list[dict]] | None = None) -> str:
    """The chart's Vega-Lite spec, themed, with its named datasets, serialised canonically."""
    chart = (chart.configure(font=FONT, background="white", padding=12)
             .configure_title(fontSize=16, subtitleFontSize=12, subtitleColor="#555555", anchor="start")
             .configure_axis(labelFontSize=11, titleFontSize=12)
             .configure_legend(labelFontSize=11, titleFontSize=12, labelLimit=260)
             .configure_view(stroke="#dddddd"))
    spec = chart.to_dict(validate=False)
    if datasets:
        spec["datasets"] = {**spec.get("datasets", {}), **datasets}
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def placeholder(title: str, why: str):
    """A small chart that says why a view has nothing to show (keeps the set of files fixed)."""
    import altair as alt

    return alt.Chart(alt.Data(values=[{"m": why}])).mark_text(fontSize=13).encode(text="m:N").properties(
        width=500, height=80, title=title)


def render(chart, out_dir: Path, name: str, datasets: dict[str, list[dict]] | None = None,
           png: bool = True) -> list[Path]:
    """Write ``<name>.html`` (and ``<name>.png`` when ``png``) under ``out_dir``; return the paths.

    The HTML costs milliseconds (the browser runs Vega); the PNG runs Vega and rasterises here,
    0.3-2.5 s per view (benchmarks/plots.py), which is why `srl` makes it opt-in.
    """
    import vl_convert as vlc

    spec = spec_json(chart, datasets)
    paths = []
    if png:
        paths.append(out_dir / f"{name}.png")
        atomic_write(paths[-1], vlc.vegalite_to_png(spec, scale=SCALE))
    paths.append(out_dir / f"{name}.html")
    atomic_write(paths[-1], vlc.vegalite_to_html(spec, bundle=False))
    return paths
