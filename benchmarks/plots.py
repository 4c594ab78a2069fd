"""How long a run's plots take: HTML only (`srl`'s default) against HTML + PNG (`srl --png`,
what `srl` always did before).

    python benchmarks/plots.py                       # the default scenario
    python benchmarks/plots.py run.training_steps=2  # any `srl` overrides

It simulates once, then times, each in a fresh process (so imports count, as they do for a
command): building the charts and writing HTML only, then HTML + PNG. It prints seconds per
phase and per view; nothing is written outside a temporary directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import altair, vl_convert  # noqa: F401  (what the first chart pays)
t_import = time.perf_counter() - t0
from pathlib import Path
from simrl.plots import PLOT_NAMES, charts, sample_rows, sync_mode
from simrl.plots.data import from_sim
from simrl.plots.render import render
from simrl.plots.rundir import read_report, read_telemetry
run, png = Path(sys.argv[1]), sys.argv[2] == "png"
report = read_report(run)
events, samples = read_telemetry(run)
t = time.perf_counter()
data = from_sim(report, events, sample_rows(samples), sync_mode(run))
views = {"(data)": time.perf_counter() - t}
out = run / ("plots-png" if png else "plots-html")
out.mkdir()
for name in PLOT_NAMES:
    t = time.perf_counter()
    ds = charts.Datasets()
    render(charts.VIEWS[name](ds, data), out, name, ds.values, png=png)
    views[name] = time.perf_counter() - t
print(json.dumps({"import": t_import, "views": views, "total": time.perf_counter() - t0}))
"""


def main(overrides: list[str]) -> None:
    from simrl.config import load_config
    from simrl.engine.sim import build_simulation, summarise
    from simrl.output import write_run

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, [*overrides, f"run.output_dir={tmp}", "run.plots=false"])
        t = time.perf_counter()
        sim = build_simulation(cfg)
        sim.run()
        report = summarise(sim)
        run = write_run(cfg, report, sim.events, sim.samples)
        sim_s = time.perf_counter() - t
        print(f"simulation (build + run + write): {sim_s:.2f} s; {len(sim.samples)} load samples, "
              f"{len(report.steps)} steps")
        results = {}
        for mode in ("png", "html"):
            res = subprocess.run([sys.executable, "-c", CHILD, str(run), mode], capture_output=True, text=True,
                                 check=True)
            results[mode] = json.loads(res.stdout)
        before, after = results["png"], results["html"]
        print(f"{'':16s}{'HTML+PNG (before, srl --png)':>30s}{'HTML only (after, srl)':>26s}")
        print(f"{'import altair':16s}{before['import']:>29.2f}s{after['import']:>25.2f}s")
        for name in before["views"]:
            print(f"{name:16s}{before['views'][name]:>29.2f}s{after['views'][name]:>25.2f}s")
        print(f"{'total':16s}{before['total']:>29.2f}s{after['total']:>25.2f}s")


if __name__ == "__main__":
    main(sys.argv[1:])
