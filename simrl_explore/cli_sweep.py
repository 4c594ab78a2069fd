"""`srl-sweep`: a design-space search over a YAML space (or a command-line grid).

Parses, calls `simrl_explore.sweep.run_sweep`, writes `simrl_explore.output`, renders a summary.
User errors leave through `abort()` with exit code 2.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import click

from simrl.cli.app import AppCommand, abort, common_options, json_option, to_json
from simrl.cli.app import state as app_state

EXAMPLES = """\b
Examples:
  srl-sweep --space examples/sweep/gpu32.yaml -o outputs/gpu32
  srl-sweep --space my-space.yaml --engine simpy --jobs 2 -o outputs/s
  srl-sweep cost.rollout=linear cost.training=constant deployment.rollout.kv_policy=reserve \\
      deployment.rollout.max_num_batched_tokens=0 deployment.rollout.prefix_caching=false \\
      policy=bounded_async --grid deployment.rollout.instances=1,2,4 --grid policy.max_staleness=0,1 \\
      -o outputs/grid            # a directory; or -o rows.csv / rows.json for the table alone
"""


class Progress:
    """A rich progress bar (rate and ETA) on a terminal; nothing when quiet or not a TTY."""

    def __init__(self, quiet: bool):
        self.bar = None
        if quiet or not sys.stderr.isatty():
            return
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress
        except ImportError:
            return
        self.bar = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=Console(stderr=True), transient=False,
        )

    def __enter__(self):
        if self.bar is not None:
            self.bar.start()
        return self

    def task(self, label: str, total: int):
        if self.bar is None or total <= 0:
            return lambda k: None
        bar = self.bar
        tid = bar.add_task(label, total=total, rate="")

        def tick(k: int) -> None:
            bar.advance(tid, k)
            t = bar.tasks[[x.id for x in bar.tasks].index(tid)]
            if t.elapsed:
                bar.update(tid, rate=f"{t.completed / t.elapsed:.1f} points/s")
        return tick

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


@click.command(cls=AppCommand, epilog=EXAMPLES)
@click.option("--space", "space_path", type=click.Path(dir_okay=False), help="Search-space YAML (docs/search.md).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Base YAML configuration (grid mode).")
@click.option("--grid", "grid", multiple=True, help="KEY=V1,V2,... an axis (grid mode; repeatable).")
@click.option("--engine", type=click.Choice(["auto", "fast", "simpy"]), default=None,
              help="auto: fast path where it can, else SimPy [default: the space's, else auto].")
@click.option("--surrogate", type=click.Choice(["linear", "off"]), default=None,
              help="Linearise non-linear costs for the fast path [default: the space's (linear); grid mode: off].")
@click.option("--jobs", type=click.IntRange(1), default=None, help="SimPy worker processes [default: CPU count].")
@click.option("--chunk", type=click.IntRange(1), default=1000, show_default=True,
              help="Fast-path batch size: at most this many points per batch, batches of equal size.")
@click.option("--ray", "ray_address", default=None, help="Shard fast-path batches over this Ray cluster.")
@click.option("--top-k", type=click.IntRange(0), default=None, help="Points re-checked on SimPy [default: the space's].")
@click.option("--limit", type=click.IntRange(1), default=None, help="Run only the first N points.")
@click.option("--no-compile-cache", is_flag=True, help="Do not keep compiled fast-path programs on disk.")
@click.option("-o", "--output", required=True, type=click.Path(), help="Output directory (or a .csv/.json file).")
@common_options
@json_option
@click.argument("overrides", nargs=-1)
def main(space_path, config_path, grid, engine, surrogate, jobs, chunk, ray_address, top_k, limit, no_compile_cache,
         output, as_json, overrides):
    """Search a design space: run every point (fast path or SimPy), write the table, the Pareto
    front, plots and a report, and re-check the top-k on the SimPy engine.

    Compiled fast-path programs are kept in $SIMRL_FAST_CACHE_DIR (default ~/.cache/simrl/jax).
    """
    import attrs

    from simrl.config import ConfigError
    from simrl.cost.base import CostModelError
    from simrl_explore.runner import SweepError

    quiet = app_state.quiet or as_json  # -q: no progress bar and no table; --json: machine output only
    from simrl.cli.app import OutputError, check_output_dir, check_output_file
    from simrl_explore.space import SpaceError, grid_space, load_space

    try:  # before any work: the whole sweep ran, then writing its results raised (a file in the way)
        (check_output_file if output.endswith((".csv", ".json")) else check_output_dir)(output)
    except OutputError as exc:
        abort(str(exc))
    if not no_compile_cache:
        os.environ.setdefault("SIMRL_FAST_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "simrl", "jax"))
    try:
        if space_path:
            if grid or overrides or config_path:
                abort("--space takes the whole space from the file; put --grid / --config / overrides in it")
            space = load_space(space_path)
        else:
            if not grid:
                abort("give --space FILE, or --grid KEY=V1,V2 ... (see --help)")
            space = grid_space(list(overrides), list(grid), config_path)
            space = attrs.evolve(space, surrogate="off", top_k=0 if top_k is None else top_k)
        changes = {k: v for k, v in (("engine", engine), ("surrogate", surrogate), ("top_k", top_k)) if v is not None}
        space = attrs.evolve(space, **changes)
    except SpaceError as exc:
        abort(str(exc))
    from simrl_explore.output import table_text, write_outputs
    from simrl_explore.sweep import run_sweep

    try:
        with Progress(quiet) as prog:
            res = run_sweep(space, jobs=jobs, chunk=chunk, ray_address=ray_address, progress=prog.task, limit=limit)
    except (SpaceError, SweepError, ConfigError, CostModelError) as exc:
        abort(str(exc))
    if res.rows and not res.ok():
        # nothing to rank or plot: say why every point fell out instead of writing empty results
        why = Counter(f"{r.get('status')}: {r.get('reason') or 'no reason given'}" for r in res.rows)
        top = "; ".join(f"{n} x {w}" for w, n in why.most_common(3))
        abort(f"{space_path or 'the grid'}: none of the {len(res.rows)} points could be simulated ({top}); "
              "nothing written")
    t = res.timings
    if output.endswith((".csv", ".json")):
        import json

        from simrl.atomic import atomic_write

        text = (json.dumps([{c: r.get(c) for c in res.columns} for r in res.rows], indent=1) + "\n"
                if output.endswith(".json") else table_text(res.rows, res.columns))
        atomic_write(output, text)
    else:
        write_outputs(res, output)
    if as_json:
        click.echo(to_json({"output": output, "points": len(res.rows), "simulated": t["simulated"],
                            "engines": dict(res.engines), "dropped": dict(res.dropped),
                            "pareto": len(res.front()), "recheck_agrees": res.recheck_agrees(),
                            "timings": t}))
        return
    if not quiet:
        click.echo(render_summary(res))
    click.echo(timing_line(t) + f"; wrote {output}")


def timing_line(t: dict) -> str:
    """Where the time went: setup (configurations and checks, lowering), compile, simulation, re-check."""
    return (f"{t['simulated']} points simulated in {t['simulate_s']:.1f} s ({t['points_per_s']:.1f} points/s; "
            f"compile {t['compile_s']:.1f} s of it); setup {t['setup_s']:.1f} s (configurations and checks "
            f"{t['prepare_s']:.1f} s, surrogates and lowering {t['route_s']:.1f} s), re-check {t['recheck_s']:.1f} s, "
            f"total {t['total_s']:.1f} s")


def render_summary(res) -> str:
    from simrl_explore.output import _md_table
    from simrl_explore.space import OBJECTIVES

    s = res.space
    vars_ = [a.name for a in s.axes] + [d.name for d in s.derived]
    lines = [f"engines: {', '.join(f'{k} {v}' for k, v in sorted(res.engines.items())) or 'none'}"]
    for why, n in res.fallbacks.most_common(3):
        lines.append(f"  simpy fallback x{n}: {why}")
    inert = res.inert_axes()
    if inert:
        lines.append(f"warning: axes that change no simulated outcome (values tie everywhere): {', '.join(inert)}")
    for why, n in res.dropped.most_common(5):
        lines.append(f"dropped x{n}: {why}")
    cols = ["point", *vars_, *(OBJECTIVES[o][1] for o in s.objectives), "binding", "engine"]
    lines.append(f"top {min(s.top_k or 5, len(res.ok()))} by {s.rank_by}:")
    lines.append(_md_table(res.ranked()[: s.top_k or 5], cols).rstrip())
    if res.recheck:
        ok = sum(c["agrees"] for c in res.recheck)
        errs = [c.get("step_time_rel_err", float("nan")) for c in res.recheck]
        lines.append(f"oracle re-check: {ok}/{len(res.recheck)} agree within {s.recheck_tolerance:.0%} "
                     f"(step time rel. error max {max(errs):.2%}); SimPy order of the top-k: "
                     f"{[c.get('simpy_rank') for c in res.recheck]}")
    return "\n".join(lines)
