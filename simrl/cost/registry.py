"""The one table of cost-model families, by target (rollout, training, weight_sync) and name.

Every family is an object of the `simrl.cost.family.Family` protocol, defined in the module of
its model and registered here once. Whether a family is fitted (``srl-regress fit``), built from
knobs (``cost.<target>=NAME``) or both is a property of the family, not a second list of names.
Plug-ins add families with `register` (or `simrl.cost.build.register_rollout_family` & co.).

`read` opens an artifact file and checks its family name and coefficients (an `ArtifactError`
naming the file and key).
"""

from __future__ import annotations

import os

from simrl.cost import composed, distserve, fit_roofline, fit_training, fit_weight_sync, linear, psrl_fit
from simrl.cost.artifact import TARGETS, ArtifactError, read_artifact
from simrl.cost.base import CostModelError
from simrl.cost.family import Family, check_target

_FAMILIES: dict[str, dict[str, Family]] = {t: {} for t in TARGETS}


def register(fam: Family) -> None:
    """Add (or replace) a family under its target and name."""
    check_target(fam.target)
    if not isinstance(fam, Family):
        raise TypeError(f"{fam!r} does not implement the Family protocol (target, name, fit, predict, check, build)")
    if fam.name.endswith(".json"):
        raise ValueError(f"family name {fam.name!r} may not end in .json (reserved for artifact paths)")
    _FAMILIES[fam.target][fam.name] = fam


def unregister(target: str, name: str) -> None:
    _FAMILIES[target].pop(name, None)


def names(target: str, *, fittable: bool | None = None, from_knobs: bool | None = None) -> list[str]:
    """Registered family names of ``target``, optionally only fittable / knob-built ones."""
    check_target(target)
    return sorted(n for n, f in _FAMILIES[target].items()
                  if (fittable is None or f.fittable == fittable)
                  and (from_knobs is None or f.from_knobs == from_knobs))


def family(target: str, name: str) -> Family:
    check_target(target)
    fam = _FAMILIES[target].get(name)
    if fam is None:
        raise CostModelError(f"unknown {target} family {name!r}; expected one of: {', '.join(names(target))}")
    return fam


def fittable() -> dict[str, str]:
    """``{family name: target}`` of every fittable family (names are unique among them)."""
    out: dict[str, str] = {}
    for target in TARGETS:
        for n, f in _FAMILIES[target].items():
            if f.fittable:
                if n in out:
                    raise CostModelError(f"fittable family name {n!r} is registered for {out[n]} and {target}")
                out[n] = target
    return out


def fitted_family(name: str) -> Family:
    """The fittable family called ``name`` (``weight_sync`` is an alias of the fitted weight sync)."""
    if name == "weight_sync":
        name = "fitted"
    table = fittable()
    if name not in table:
        raise CostModelError(f"unknown family {name!r}; expected one of {', '.join(sorted(table))}")
    return _FAMILIES[table[name]][name]


def read(path: str | os.PathLike) -> tuple[dict, Family]:
    """An artifact file's content and family; the family name and coefficients are checked."""
    where = os.fspath(path)
    art = read_artifact(where)
    fam = _FAMILIES[art["target"]].get(art["family"])
    if fam is None or not fam.fittable:
        raise ArtifactError(f"{where}: family: {art['family']!r} is not a fitted {art['target']} family "
                            f"({', '.join(names(art['target'], fittable=True))})")
    fam.check(art["coefficients"], where)
    check_domain = getattr(fam, "check_domain", None)
    if check_domain is not None:
        check_domain(art["validity_domain"], where)
    return art, fam


for _fam in (composed.FAMILY, distserve.FAMILY, psrl_fit.FAMILY, fit_roofline.FAMILY, *linear.FAMILIES,
             *fit_training.FAMILIES, *fit_weight_sync.families()):
    register(_fam)
