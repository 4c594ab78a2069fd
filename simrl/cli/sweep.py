"""`srl-sweep`: run a grid of configurations (fast JAX engine or SimPy) and write one row each.

Parses, calls `simrl_fast.sweep`, renders. User errors leave through `abort()`.
"""

from __future__ import annotations

import time

import click

from simrl.cli.main import abort
from simrl.config import ConfigError

EXAMPLES = """\b
Examples:
  srl-sweep cost.rollout=linear cost.training=constant cost.weight_sync=fixed \\
      cost.weight_sync_knobs.publish_s=2 deployment.rollout.max_num_batched_tokens=0 \\
      deployment.rollout.kv_policy=reserve deployment.rollout.prefix_caching=false \\
      policy=bounded_async policy.inflight_rule=keep_pause \\
      --grid deployment.rollout.instances=1,2,4 --grid policy.max_staleness=0,1,2 -o sweep.csv
  srl-sweep --config my.yaml --grid policy.batch_groups=16,32 --engine simpy -o sweep.json
"""


@click.command(epilog=EXAMPLES)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--grid", "grid", multiple=True, help="KEY=V1,V2,... an axis of the sweep (repeatable).")
@click.option("--engine", type=click.Choice(["fast", "simpy"]), default="fast", show_default=True)
@click.option("--fallback", type=click.Choice(["error", "simpy"]), default="error", show_default=True,
              help="What to do with configurations outside the fast path's feature set.")
@click.option("--chunk", type=click.IntRange(1), default=128, show_default=True,
              help="Configurations per fast-engine batch (cache-sized).")
@click.option("--ray", "ray_address", default=None, help="Shard fast-engine chunks over this Ray cluster.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Output file (.csv or .json).")
@click.option("--quiet", is_flag=True, help="Do not print the table.")
@click.argument("overrides", nargs=-1)
def main(config_path, grid, engine, fallback, chunk, ray_address, output, quiet, overrides):
    """Expand the --grid axes (cartesian product) over the base config and overrides, run each.

    The fast engine compiles once per shape (seconds); set SIMRL_FAST_CACHE_DIR to keep compiled
    programs between runs.
    """
    from simrl.cost.base import CostModelError
    from simrl.engine.core import SimulationError
    from simrl_fast.lowering import FastPathUnsupported
    from simrl_fast.sweep import expand_grid, grid_keys, run_sweep, write_rows

    try:
        combos = expand_grid(list(overrides), list(grid))
    except ValueError as exc:
        abort(str(exc))
    t0 = time.perf_counter()
    try:
        with _progress(len(combos), quiet) as tick:
            rows = run_sweep(config_path, combos, engine=engine, fallback=fallback, chunk=chunk,
                             ray_address=ray_address, progress=tick)
    except (ConfigError, FastPathUnsupported, SimulationError, CostModelError, RuntimeError) as exc:
        abort(str(exc))
    wall = time.perf_counter() - t0
    write_rows(output, rows)
    if not quiet:
        click.echo(render_table(rows, grid_keys(list(grid))))
    click.echo(f"{len(rows)} configurations in {wall:.2f} s ({len(rows) / max(wall, 1e-9):.1f} configs/s); "
               f"wrote {output}")


def render_table(rows: list[dict], keys: list[str], limit: int = 20) -> str:
    cols = [*keys, "makespan_s", "step_time_mean_s", "trained_tokens_per_s", "staleness_mean", "staleness_max",
            "engine"]
    fmt = {"makespan_s": "{:.2f}", "step_time_mean_s": "{:.3f}", "trained_tokens_per_s": "{:.0f}",
           "staleness_mean": "{:.2f}"}
    cells = [[fmt.get(c, "{}").format(r[c]) for c in cols] for r in rows[:limit]]
    heads = [c.rsplit(".", 1)[-1] for c in cols]
    widths = [max(len(h), *(len(row[k]) for row in cells)) if cells else len(h) for k, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    if len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more rows in the output file")
    return "\n".join(lines)


class _progress:
    """A rich progress bar when rich is installed and output is wanted; otherwise nothing."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet, self.bar = total, quiet, None

    def __enter__(self):
        if not self.quiet:
            try:
                from rich.progress import Progress
            except ImportError:
                Progress = None
            if Progress is not None:
                self.bar = Progress(transient=True)
                self.bar.start()
                self.task = self.bar.add_task("configurations", total=self.total)
        return self.tick

    def tick(self, k: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, k)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False
