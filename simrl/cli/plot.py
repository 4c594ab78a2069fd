"""`srl-plot RUN_DIR`: re-render a run's six plots from its files, without re-simulating.

The output is byte-identical to the plots the run wrote itself. `--export-realrun FILE` also
writes the run in the real-run format, to compare it (or hand it) elsewhere.
"""

from __future__ import annotations

import sys
import time

import click

from simrl.cli.app import (
    AppCommand,
    check_output_file,
    common_options,
    info,
    json_option,
    to_json,
    user_errors,
)

EXAMPLES = """\b
Examples:
  srl-plot outputs/bounded_async-qwen3-8b-e6a30071
  srl-plot outputs/my-run -o my-run.realrun.jsonl     # also export the real-run format
"""


@click.command(cls=AppCommand, epilog=EXAMPLES)
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("-o", "--output", "export", type=click.Path(dir_okay=False),
              help="Also write the run as a simrl.realrun.v1 JSONL file here.")
@click.option("--export-realrun", "export", type=click.Path(dir_okay=False), hidden=True)
@common_options
@json_option
def cli(run_dir, export, as_json):
    """Re-render RUN_DIR/plots from report.json and telemetry.jsonl."""
    from simrl.plots.rundir import RunDirError, replot
    from simrl.realrun import from_sim_run, write_realrun

    t0 = time.perf_counter()
    with user_errors(RunDirError):
        if export:
            check_output_file(export)
        paths = replot(run_dir)
        if export:
            write_realrun(export, from_sim_run(run_dir))
    wall = time.perf_counter() - t0
    if as_json:

        click.echo(to_json({"files": [str(p) for p in paths], "realrun": export, "wall_s": round(wall, 3)}))
        return
    for p in paths:
        info(str(p))
    info(f"{len(paths)} files in {wall:.2f} s")
    if export:
        info(f"real-run file: {export}")


def main(argv=None):
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="srl-plot")
