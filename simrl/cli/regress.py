"""`srl-regress`: fit cost models from observations, evaluate and show artifacts.

Commands parse, call `simrl.cost.fit`, render. User errors leave through `abort()`.
"""

from __future__ import annotations

import json

import click

from simrl.cost.artifact import write_artifact
from simrl.cost.base import CostModelError
from simrl.cost.fit import evaluate, fit_artifact, fittable_families
from simrl.cost.observations import ObservationError, read_many
from simrl.cost.registry import fitted_family
from simrl.cost.registry import read as read_artifact

EXAMPLES = """\b
Examples:
  srl-profile import vidur -o vidur.jsonl          # the Vidur H100 data shipped with simrl
  srl-regress fit --family composed --obs vidur.jsonl -o composed.json --kfold 5
  srl-regress eval composed.json --obs vidur.jsonl --json
  srl-regress show composed.json
"""


def abort(message: str, code: int = 2):
    click.secho(f"error: {message}", fg="red", err=True)
    raise SystemExit(code)


@click.group(epilog=EXAMPLES)
def cli():
    """Fit, evaluate and inspect cost-model artifacts."""


def _errors_table(result: dict) -> str:
    lines = [f"{'group':<26}{'n':>7}{'median%':>10}{'mean%':>10}{'max%':>10}"]
    rows = [("overall", result["overall"]), *result["per_group"].items()]
    for name, s in rows:
        lines.append(f"{name:<26}{s['n']:>7}{s['median_ape']:>10.2f}{s['mean_ape']:>10.2f}{s['max_ape']:>10.1f}")
    return "\n".join(lines)


@cli.command("fit")
@click.option("--family", required=True, type=click.Choice(sorted([*fittable_families(), "weight_sync"])))
@click.option("--obs", "obs_files", multiple=True, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@click.option("--kfold", type=int, default=0, help="k-fold cross-validation (0: off)")
@click.option("--seed", type=int, default=0, help="fold assignment seed")
@click.option("--model", default=None, help="model the fit belongs to (layout-specific families)")
@click.option("--gpu", default=None, help="GPU of the observations (default: from them)")
@click.option("--tp", type=int, default=None)
@click.option("--pp", type=int, default=None)
@click.option("--no-tables", is_flag=True, help="composed: keep only the physics, not the measured tables")
@click.option("--label", default="fitted on measured observations", help="provenance label")
def fit_cmd(family, obs_files, output, kfold, seed, model, gpu, tp, pp, no_tables, label):
    """Fit FAMILY on observation files and write an artifact."""
    given = {"model": model, "gpu": gpu, "tp": tp, "pp": pp}
    try:
        obs = read_many(obs_files)
        missing = [k for k in fitted_family(family).fit_requires if given[k] is None]
        if missing:
            abort(f"--family {family} is fitted for one deployment: give {' and '.join('--' + k for k in missing)} "
                  "(recorded as fitted_for; the run and the fast path refuse another layout)")
        opts = {k: v for k, v in given.items() if v is not None}
        art = fit_artifact(family, obs, files=list(obs_files), kfold=kfold, seed=seed, label=label,
                           with_tables=not no_tables, **opts)
        write_artifact(output, art)
    except (ObservationError, CostModelError, ValueError) as exc:
        abort(str(exc))
    click.echo(f"wrote {output}: {art['target']} family {art['family']} from {len(obs)} observations")
    click.echo(_errors_table(art["fit_quality"]["training"]))
    if "kfold" in art["fit_quality"]:
        click.echo(f"\n{kfold}-fold cross-validation (held-out):")
        click.echo(_errors_table(art["fit_quality"]["kfold"]))


@cli.command("eval")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--obs", "obs_files", multiple=True, required=True, type=click.Path(dir_okay=False))
@click.option("--physics-only", is_flag=True, help="composed: ignore measured tables (unseen-shape error)")
@click.option("--json", "as_json", is_flag=True)
def eval_cmd(artifact, obs_files, physics_only, as_json):
    """Median, mean and max absolute percentage error of ARTIFACT on observations."""
    try:
        art, _ = read_artifact(artifact)
        result = evaluate(art, read_many(obs_files), physics_only=physics_only, **art.get("fitted_for", {}))
    except (ObservationError, CostModelError, ValueError) as exc:
        abort(str(exc))
    click.echo(json.dumps(result, indent=1, sort_keys=True) if as_json else _errors_table(result))


@cli.command("show")
@click.argument("artifact", type=click.Path(dir_okay=False))
def show_cmd(artifact):
    """Summarise an artifact: family, provenance, validity domain, fit quality."""
    try:
        art, _ = read_artifact(artifact)
    except CostModelError as exc:
        abort(str(exc))
    click.echo(f"{artifact}: {art['target']} / {art['family']} ({art['schema']})")
    prov = art["provenance"]
    click.echo(f"provenance: {prov.get('label', '')}; {prov.get('n_observations', '?')} observations; "
               f"hardware: {', '.join(prov.get('hardware', [])) or '-'}")
    if art.get("fitted_for"):
        click.echo("fitted for: " + ", ".join(f"{k}={v}" for k, v in sorted(art["fitted_for"].items())))
    for dim, (lo, hi) in sorted(art["validity_domain"].items()):
        click.echo(f"domain {dim}: [{lo:g}, {hi:g}]")
    coefs = {k: v for k, v in art["coefficients"].items() if not isinstance(v, dict | list)}
    if coefs:
        click.echo("coefficients: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(coefs.items())))
    for key in ("training", "kfold"):
        if key in art["fit_quality"]:
            click.echo(f"\nfit quality ({key}):\n" + _errors_table(art["fit_quality"][key]))


def main(argv=None):
    cli.main(args=argv, prog_name="srl-regress")


if __name__ == "__main__":
    main()
