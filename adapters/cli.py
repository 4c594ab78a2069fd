"""`srl-profile`: record observations. This module holds the click group and the importers.

`srl-profile import vidur PATH -o obs.jsonl` converts Vidur-format CSVs into observations
(`simrl.cost.vidur_import`). Profilers that drive real hardware (kernels, kv-probe, vllm,
megatron, fsdp) register further subcommands on `cli`; they import torch / vllm lazily.
Commands parse, call the domain, render; user errors leave through `abort()`.
"""

from __future__ import annotations

import collections

import click

from simrl.cost.observations import ObservationError, write_observations


def abort(message: str, code: int = 2):
    click.secho(f"error: {message}", fg="red", err=True)
    raise SystemExit(code)


@click.group()
def cli():
    """Record measurements as JSONL observations (schema: docs/observations.md)."""


@cli.group("import")
def import_group():
    """Convert measurements made elsewhere into observations."""


@import_group.command("vidur")
@click.argument("path", type=click.Path(exists=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
def import_vidur_cmd(path, output):
    """Convert Vidur compute (mlp.csv) and network (all_reduce / send_recv) CSVs under PATH."""
    from simrl.cost.vidur_import import import_vidur

    try:
        obs = import_vidur(path)
        n = write_observations(output, obs)
    except (ObservationError, ValueError, KeyError) as exc:
        abort(str(exc))
    counts = collections.Counter((o.kind, o.name) for o in obs)
    click.echo(f"wrote {n} observations to {output}")
    for (kind, name), c in sorted(counts.items()):
        click.echo(f"  {kind:<10} {name:<26} {c}")


def main(argv=None):
    cli.main(args=argv, prog_name="srl-profile")


if __name__ == "__main__":
    main()
