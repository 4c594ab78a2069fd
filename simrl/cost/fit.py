"""Fit and evaluate any fittable family: the domain layer behind `srl-regress`.

`fit_artifact` turns observations into an artifact dict (coefficients, validity domain, fit
quality with optional k-fold cross-validation, provenance); `evaluate` predicts each observation
an artifact can answer and returns median / mean / max absolute percentage error overall and per
group (operator, collective or kind). The family-specific work is the family's own
(`simrl.cost.registry`); this module is the loop around it. No file I/O here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from simrl.cost import registry
from simrl.cost.artifact import SCHEMA
from simrl.cost.base import CostModelError
from simrl.cost.fitting import error_summary
from simrl.cost.observations import Observation


def fittable_families() -> dict[str, str]:
    """``{family: target}`` for ``srl-regress fit --family``."""
    return registry.fittable()


def target_of(family: str) -> str:
    return registry.fitted_family(family).target


def _provenance(obs: Sequence[Observation], files: Sequence[str], label: str) -> dict:
    return {
        "label": label,
        "observation_files": list(files),
        "n_observations": len(obs),
        "sources": sorted({o.provenance.get("source", "") for o in obs})[:50],
        "hardware": sorted({o.provenance.get("hardware", "") for o in obs}),
    }


def fit_coefficients(family: str, obs: Sequence[Observation], opts: dict) -> tuple[dict, dict]:
    """(coefficients, validity domain) of one family from observations."""
    return registry.fitted_family(family).fit(obs, opts)


def make_artifact(family: str, coefs: dict, dom: dict, obs: Sequence[Observation], files: Sequence[str],
                  opts: dict, label: str) -> dict:
    fam = registry.fitted_family(family)
    art = {"schema": SCHEMA, "target": fam.target, "family": fam.name, "coefficients": coefs,
           "validity_domain": dom, "fit_quality": {}, "provenance": _provenance(obs, files, label)}
    fitted_for = {k: opts[k] for k in ("model", "gpu", "tp", "pp") if opts.get(k) is not None}
    if fitted_for:
        art["fitted_for"] = fitted_for
    return art


Progress = Callable[[int, int], None]  # (fits done, fits in all)


def fit_artifact(family: str, obs: Sequence[Observation], files: Sequence[str] = (), kfold: int = 0,
                 seed: int = 0, label: str = "fitted on measured observations",
                 progress: Progress | None = None, **opts) -> dict:
    """Fit ``family`` on ``obs`` and return a complete artifact dict (optionally k-fold checked).

    ``progress(done, total)`` is called after each fit: the full one and each fold's."""
    family = registry.fitted_family(family).name
    total = 1 + (kfold if kfold and kfold > 1 else 0)
    coefs, dom = fit_coefficients(family, obs, opts)
    art = make_artifact(family, coefs, dom, obs, files, opts, label)
    art["fit_quality"]["training"] = evaluate(art, obs, **opts)
    if progress:
        progress(1, total)
    if kfold and kfold > 1:
        fold_done = (lambda i, k: progress(1 + i, total)) if progress else None
        art["fit_quality"]["kfold"] = cross_validate(family, obs, kfold, seed, progress=fold_done, **opts)
    return art


def predictions(art: dict, obs: Sequence[Observation], physics_only: bool = False,
                **opts) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(predicted, measured, group) for every observation the artifact can answer."""
    fam = registry.family(art["target"], art["family"])
    return fam.predict(art, obs, {**opts, "physics_only": physics_only})


def summarize(pred: np.ndarray, act: np.ndarray, grp: Sequence[str]) -> dict:
    by: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(grp):
        by[g].append(i)
    return {"overall": error_summary(pred, act),
            "per_group": {g: error_summary(pred[idx], act[idx]) for g, idx in sorted(by.items())}}


def evaluate(art: dict, obs: Sequence[Observation], physics_only: bool = False, **opts) -> dict:
    opts = {**art.get("fitted_for", {}), **opts}  # the model / GPU / layout the artifact was fitted for
    pred, act, grp = predictions(art, obs, physics_only=physics_only, **opts)
    if pred.size == 0:
        raise CostModelError(f"{art['family']}: none of the {len(obs)} observations can be evaluated "
                             "by this artifact (wrong kinds?)")
    return summarize(pred, act, grp)


def cross_validate(family: str, obs: Sequence[Observation], k: int, seed: int = 0,
                   progress: Progress | None = None, **opts) -> dict:
    """K-fold cross-validation over the observations the family is evaluated on;
    ``progress(folds done, k)`` after each fold."""
    rng = np.random.default_rng(seed)
    folds = rng.permutation(len(obs)) % k
    preds, acts, grps = [], [], []
    for f in range(k):
        train = [o for o, g in zip(obs, folds, strict=True) if g != f]
        test = [o for o, g in zip(obs, folds, strict=True) if g == f]
        coefs, dom = fit_coefficients(family, train, opts)
        art = make_artifact(family, coefs, dom, train, (), opts, "")
        p, a, g = predictions(art, test, **opts)
        preds.append(p)
        acts.append(a)
        grps += g
        if progress:
            progress(f + 1, k)
    out = summarize(np.concatenate(preds), np.concatenate(acts), grps)
    out["k"] = k
    out["seed"] = seed
    return out
