"""`srl-psrl-plot LOG -o OUT_DIR`: convert a real PSRL run's metric log and plot it.

The log format is described in docs/real-run-format.md (veRL-style per-step metrics); a file
already in the real-run format is accepted as is. Writes OUT_DIR/realrun.jsonl and the run
views the data allow under OUT_DIR/plots, and says which views were skipped and why.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from simrl.cli.app import (
    AppCommand,
    abort,
    check_output_dir,
    common_options,
    info,
    json_option,
    to_json,
    user_errors,
)

EXAMPLES = """\b
Examples:
  srl-psrl-plot psrl_metrics.jsonl -o outputs/psrl-real
  srl-psrl-plot train.log -o outputs/psrl-real --model qwen3-8b
  srl-compare outputs/my-sim outputs/psrl-real/realrun.jsonl
"""


@click.command(cls=AppCommand, epilog=EXAMPLES)
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output directory (realrun.jsonl, plots/); replaced whole when complete.")
@click.option("--model", default="", help="Model name to record in the real-run header.")
@common_options
@json_option
def cli(log, out_dir, model, as_json):
    """Convert LOG (a PSRL metric log) to the real-run format and plot it."""
    from simrl.atomic import staged_dir
    from simrl.plots import write_realrun_plots
    from simrl.realrun import SCHEMA, from_psrl_log, read_realrun, write_realrun

    path = Path(log)
    out = Path(out_dir)
    with user_errors():
        check_output_dir(out.parent if str(out.parent) else ".", "-o/--output")
        try:
            with open(path, "rb") as fh:
                first = fh.readline().decode("utf-8", errors="replace")
        except OSError as exc:
            abort(f"{path}: cannot read ({exc.strerror or exc})")
        run = read_realrun(path) if f'"{SCHEMA}"' in first else from_psrl_log(path, model=model)
        with staged_dir(out) as tmp:
            write_realrun(tmp / "realrun.jsonl", run)
            paths, skipped = write_realrun_plots(run, tmp / "plots", title=path.name)
    paths = [out / p.relative_to(tmp) for p in paths]
    if as_json:

        click.echo(to_json({"steps": len(run.steps), "notes": run.notes, "realrun": str(out / "realrun.jsonl"),
                               "plots": [str(p) for p in paths if p.suffix == ".png"], "skipped": skipped}))
        return
    info(f"converted {len(run.steps)} steps ({run.notes or 'no notes'})")
    click.echo(f"real-run file: {out / 'realrun.jsonl'}")
    for p in paths:
        if p.suffix == ".png":
            info(f"plot: {p}")
    for name, why in skipped.items():
        info(f"skipped {name}: {why}")


def main(argv=None):
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="srl-psrl-plot")
