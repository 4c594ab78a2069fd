"""`srl-compare SIM_RUN REAL_RUN`: per-step error of a simulation against a real run.

Each argument is a simulated run directory, a real-run JSONL (simrl.realrun.v1) or a harness
results directory (updates.jsonl). The domain logic is `simrl.compare`; this parses, calls it
and renders (a table, or JSON with --json; overlay plots with --plots).
"""

from __future__ import annotations

import sys

import click

from simrl.cli.app import (
    AppCommand,
    check_output_dir,
    common_options,
    info,
    json_option,
    to_json,
    user_errors,
)

EXAMPLES = """\b
Examples:
  srl-compare outputs/my-run real.realrun.jsonl
  srl-compare outputs/my-run results/skyrl-multi_turn-0001 --allow-partial -o cmp/
  srl-compare outputs/my-run outputs/my-run --json     # a run against itself: zero error
"""


@click.command(cls=AppCommand, epilog=EXAMPLES)
@click.argument("sim_run", type=click.Path())
@click.argument("real_run", type=click.Path())
@json_option
@click.option("-o", "--output", "--plots", "plots_dir", type=click.Path(file_okay=False),
              help="Write overlay plots into this directory.")
@click.option("--allow-partial", is_flag=True, help="Compare only the steps both runs have.")
@common_options
def cli(sim_run, real_run, as_json, plots_dir, allow_partial):
    """Align SIM_RUN and REAL_RUN by training step and report where they disagree."""
    from simrl.compare import CompareError, compare, render_text
    from simrl.realrun import load_run

    with user_errors(CompareError):
        if plots_dir:
            check_output_dir(plots_dir, "-o/--output")
        result = compare(load_run(sim_run), load_run(real_run), allow_partial=allow_partial)
    if as_json:
        click.echo(to_json(result))
    else:
        click.echo(render_text(result))
    if plots_dir:
        from simrl.plots.overlay import write_overlay_plots

        with user_errors():
            paths = write_overlay_plots(result, plots_dir)
        info(f"overlay plots: {', '.join(str(p) for p in paths if p.suffix == '.png')}", err=as_json)


def main(argv=None):
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="srl-compare")
