"""`srl-regress`: fit cost models from observations, evaluate and show artifacts.

Commands parse, call `simrl.cost.fit`, render. User errors leave through `abort()`.
"""

from __future__ import annotations

import click

from simrl.cli.app import (
    AppGroup,
    abort,
    check_output_file,
    common_options,
    debug,
    info,
    json_option,
    to_json,
    user_errors,
)
from simrl.cli.progress import watch
from simrl.cost.artifact import write_artifact
from simrl.cost.fit import evaluate, fit_artifact, fittable_families
from simrl.cost.observations import read_many
from simrl.cost.registry import fitted_family
from simrl.cost.registry import read as read_artifact

EXAMPLES = """\b
Examples:
  srl-profile import vidur -o vidur.jsonl
  srl-regress fit --family composed --obs vidur.jsonl -o composed.json --kfold 5
  srl-regress eval composed.json --obs vidur.jsonl --json
  srl-regress show composed.json
"""


SEED = click.IntRange(0, 2**63 - 1)
DEGREE = click.IntRange(1, 4096)


@click.group(cls=AppGroup, epilog=EXAMPLES)
def cli():
    """Fit, evaluate and inspect cost-model artifacts."""


def _errors_table(result: dict) -> str:
    lines = [f"{'group':<26}{'n':>7}{'median%':>10}{'mean%':>10}{'max%':>10}"]
    rows = [("overall", result["overall"]), *result["per_group"].items()]
    for name, s in rows:
        lines.append(f"{name:<26}{s['n']:>7}{s['median_ape']:>10.2f}{s['mean_ape']:>10.2f}{s['max_ape']:>10.1f}")
    return "\n".join(lines)


def fit_progress(fits: int, total: int, kfold: int) -> tuple[str, float]:
    """The progress text of `srl-regress fit`: the full fit, then each cross-validation fold."""
    if fits == 0:
        text = f"fitting on every observation (then {kfold} folds)" if kfold > 1 else "fitting"
    else:
        text = f"fold {fits - 1}/{kfold} cross-validated" if kfold > 1 else "fitted"
    return text, fits / total


@cli.command("fit")
@click.option("--family", required=True, type=click.Choice(sorted([*fittable_families(), "weight_sync"])))
@click.option("--obs", "obs_files", multiple=True, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="artifact to write (JSON)")
@click.option("--kfold", type=click.IntRange(0, None), default=0,
              help="k-fold cross-validation, 2 to the number of observations (0: off)")
@click.option("--seed", type=SEED, default=0, help="fold assignment seed")
@click.option("--model", default=None, help="model the fit belongs to (layout-specific families)")
@click.option("--gpu", default=None, help="GPU of the observations (default: from them; a CPU run's "
              "observations resolve to the catalog's CPU entry)")
@click.option("--tp", type=DEGREE, default=None)
@click.option("--pp", type=DEGREE, default=None)
@click.option("--no-tables", is_flag=True, help="composed: keep only the physics, not the measured tables")
@click.option("--label", default="fitted on measured observations", help="provenance label")
@common_options
@json_option
def fit_cmd(family, obs_files, output, kfold, seed, model, gpu, tp, pp, no_tables, label, as_json):
    """Fit FAMILY on observation files and write an artifact."""
    if kfold == 1:
        abort("--kfold 1 is not cross-validation (every observation would be held out at once); "
              "use 0 (off) or 2 and more")
    with user_errors(ValueError):
        check_output_file(output)
        obs = read_many(obs_files)
        if kfold > len(obs):
            abort(f"--kfold {kfold} exceeds the {len(obs)} observations in {', '.join(obs_files)}; "
                  f"use at most {len(obs)} folds (or 0: off)")
        given = {"model": model, "gpu": gpu, "tp": tp, "pp": pp}
        missing = [k for k in fitted_family(family).fit_requires if given[k] is None]
        if missing:
            abort(f"--family {family} is fitted for one deployment: give {' and '.join('--' + k for k in missing)} "
                  "(recorded as fitted_for; the run and the fast path refuse another layout)")
        opts = {k: v for k, v in given.items() if v is not None}
        debug(f"fitting {family} on {len(obs)} observations" + (f", {kfold} folds" if kfold else ""))
        done = {"fits": 0, "total": 1 + (kfold if kfold > 1 else 0)}
        with watch(lambda: fit_progress(done["fits"], done["total"], kfold), f"fitting {family}"):
            art = fit_artifact(family, obs, files=list(obs_files), kfold=kfold, seed=seed, label=label,
                               with_tables=not no_tables,
                               progress=lambda i, total: done.update(fits=i, total=total), **opts)
        write_artifact(output, art)
    if as_json:
        click.echo(to_json({"output": str(output), "target": art["target"], "family": art["family"],
                               "observations": len(obs), "fit_quality": art["fit_quality"]}))
        return
    info(f"wrote {output}: {art['target']} family {art['family']} from {len(obs)} observations")
    info(_errors_table(art["fit_quality"]["training"]))
    if "kfold" in art["fit_quality"]:
        info(f"\n{kfold}-fold cross-validation (held-out):")
        info(_errors_table(art["fit_quality"]["kfold"]))


@cli.command("eval")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--obs", "obs_files", multiple=True, required=True, type=click.Path(dir_okay=False))
@click.option("--physics-only", is_flag=True, help="composed: ignore measured tables (unseen-shape error)")
@common_options
@json_option
def eval_cmd(artifact, obs_files, physics_only, as_json):
    """Median, mean and max absolute percentage error of ARTIFACT on observations."""
    with user_errors(ValueError):
        art, _ = read_artifact(artifact)
        result = evaluate(art, read_many(obs_files), physics_only=physics_only, **art.get("fitted_for", {}))
    click.echo(to_json(result) if as_json else _errors_table(result))


@cli.command("show")
@click.argument("artifact", type=click.Path(dir_okay=False))
@common_options
@json_option
def show_cmd(artifact, as_json):
    """Summarise an artifact: family, provenance, validity domain, fit quality."""
    with user_errors(ValueError):
        art, _ = read_artifact(artifact)
    if as_json:
        click.echo(to_json(art))
        return
    click.echo(f"{artifact}: {art['target']} / {art['family']} ({art['schema']})")
    prov = art["provenance"]
    hardware = prov.get("hardware") or []
    hardware = ", ".join(map(str, hardware)) if isinstance(hardware, list) else str(hardware)
    click.echo(f"provenance: {prov.get('label', '')}; {prov.get('n_observations', '?')} observations; "
               f"hardware: {hardware or '-'}")
    if art.get("fitted_for"):
        click.echo("fitted for: " + ", ".join(f"{k}={v}" for k, v in sorted(art["fitted_for"].items())))
    for dim, (lo, hi) in sorted(art["validity_domain"].items()):
        click.echo(f"domain {dim}: [{lo:g}, {hi:g}]")
    # the scalar coefficients (null: a part the fit left out, e.g. a training fit without memory)
    coefs = {k: v for k, v in art["coefficients"].items() if not isinstance(v, dict | list)}
    if coefs:
        click.echo("coefficients: " + ", ".join(f"{k}={_scalar(v)}" for k, v in sorted(coefs.items())))
    for key in ("training", "kfold"):
        if key in art["fit_quality"]:
            click.echo(f"\nfit quality ({key}):\n" + _quality(art["fit_quality"][key]))


def _scalar(v) -> str:
    return "null" if v is None else (f"{v:.4g}" if isinstance(v, int | float) and not isinstance(v, bool) else str(v))


def _quality(result) -> str:
    """A fit-quality section as the errors table; a section of another shape (the artifact's
    ``fit_quality`` is free-form) as its JSON."""
    try:
        return _errors_table(result)
    except (KeyError, TypeError, ValueError, AttributeError):
        return to_json(result)


def main(argv=None):
    cli.main(args=argv, prog_name="srl-regress")


if __name__ == "__main__":
    main()
