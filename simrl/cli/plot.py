"""`srl-plot RUN_DIR`: re-render a run's six plots from its files, without re-simulating.

The output is byte-identical to the plots the run wrote itself. `--export-realrun FILE` also
writes the run in the real-run format, to compare it (or hand it) elsewhere.
"""

from __future__ import annotations

import sys
import time

import click

from simrl.cli.main import abort

EXAMPLES = """\b
Examples:
  srl-plot outputs/bounded_async-qwen3-8b-e6a30071
  srl-plot outputs/my-run --export-realrun my-run.realrun.jsonl
"""


@click.command(epilog=EXAMPLES)
@click.argument("run_dir", type=click.Path())
@click.option("--export-realrun", "export", type=click.Path(dir_okay=False),
              help="Also write the run as a simrl.realrun.v1 JSONL file.")
def cli(run_dir, export):
    """Re-render RUN_DIR/plots from report.json and telemetry.jsonl."""
    from simrl.plots.rundir import RunDirError, replot
    from simrl.realrun import RealRunError, from_sim_run, write_realrun

    t0 = time.perf_counter()
    try:
        paths = replot(run_dir)
        if export:
            write_realrun(export, from_sim_run(run_dir))
    except (RunDirError, RealRunError) as exc:
        abort(str(exc))
    for p in paths:
        click.echo(str(p))
    click.echo(f"{len(paths)} files in {time.perf_counter() - t0:.2f} s")
    if export:
        click.echo(f"real-run file: {export}")


def main(argv=None):
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="srl-plot")
