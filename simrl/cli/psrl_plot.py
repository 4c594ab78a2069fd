"""`srl-psrl-plot LOG -o OUT_DIR`: convert a real PSRL run's metric log and plot it.

The log format is described in docs/real-run-format.md (veRL-style per-step metrics); a file
already in the real-run format is accepted as is. Writes OUT_DIR/realrun.jsonl and the run
views the data allow under OUT_DIR/plots, and says which views were skipped and why.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from simrl.cli.main import abort

EXAMPLES = """\b
Examples:
  srl-psrl-plot psrl_metrics.jsonl -o outputs/psrl-real
  srl-psrl-plot train.log -o outputs/psrl-real --model qwen3-8b
  srl-compare outputs/my-sim outputs/psrl-real/realrun.jsonl
"""


@click.command(epilog=EXAMPLES)
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output directory (realrun.jsonl, plots/).")
@click.option("--model", default="", help="Model name to record in the real-run header.")
def cli(log, out_dir, model):
    """Convert LOG (a PSRL metric log) to the real-run format and plot it."""
    from simrl.plots import write_realrun_plots
    from simrl.realrun import SCHEMA, RealRunError, from_psrl_log, read_realrun, write_realrun

    path = Path(log)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
    except OSError as exc:
        abort(f"{path}: cannot read ({exc.strerror})")
    try:
        run = read_realrun(path) if f'"{SCHEMA}"' in first else from_psrl_log(path, model=model)
    except RealRunError as exc:
        abort(str(exc))
    out = Path(out_dir)
    write_realrun(out / "realrun.jsonl", run)
    paths, skipped = write_realrun_plots(run, out / "plots", title=path.name)
    click.echo(f"converted {len(run.steps)} steps ({run.notes or 'no notes'})")
    click.echo(f"real-run file: {out / 'realrun.jsonl'}")
    for p in paths:
        if p.suffix == ".png":
            click.echo(f"plot: {p}")
    for name, why in skipped.items():
        click.echo(f"skipped {name}: {why}")


def main(argv=None):
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="srl-psrl-plot")
