"""Cost-model artifacts: the versioned JSON a fit writes and a run reads once at start.

Keys: ``schema`` ("simrl.cost-artifact.v1"), ``target`` (rollout / training / weight_sync),
``family``, ``coefficients`` (family-specific, every number finite and >= 0),
``validity_domain`` ({dimension: [lo, hi]}), ``fit_quality`` (errors, k-fold results),
``provenance`` (observation files and sources, hardware, a label such as "fitted on real data"
or "analytical"), and optional ``fitted_for`` (the model / layout a layout-specific fit belongs
to). `read_artifact` rejects a wrong schema, a missing key and NaN, infinite or negative
coefficients with the file and key path. `write_artifact` is atomic (temp file + os.replace).
`load_rollout_artifact`, `load_training_artifact` and `load_weight_sync_artifact` turn a file
into a cost-model object for a `SimConfig`.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from simrl.atomic import atomic_write
from simrl.cost.architectures import model_arch
from simrl.cost.base import CostModelError, ValidityDomain

SCHEMA = "simrl.cost-artifact.v1"
TARGETS = {
    "rollout": ("composed", "distserve", "psrl", "roofline"),
    "training": ("fixed", "linear", "analytical", "hydraulis", "fsdp"),
    "weight_sync": ("fitted",),
}
REQUIRED = ("schema", "target", "family", "coefficients", "validity_domain", "fit_quality", "provenance")


class ArtifactError(CostModelError):
    """An artifact file is unreadable or invalid; the message names the file and key."""


def _check_numbers(node: Any, path: str, where: str) -> None:
    if isinstance(node, bool) or node is None or isinstance(node, str):
        return
    if isinstance(node, int | float):
        if not math.isfinite(node):
            raise ArtifactError(f"{where}: {path}: not a finite number ({node!r})")
        if node < 0:
            raise ArtifactError(f"{where}: {path}: negative coefficient ({node!r})")
        return
    if isinstance(node, dict):
        for k, v in node.items():
            _check_numbers(v, f"{path}.{k}", where)
        return
    if isinstance(node, list):
        for i, v in enumerate(node):
            _check_numbers(v, f"{path}[{i}]", where)
        return
    raise ArtifactError(f"{where}: {path}: unexpected value of type {type(node).__name__}")


def validate_artifact(data: Any, where: str = "<artifact>") -> dict:
    """Check structure and coefficients; returns ``data`` or raises `ArtifactError`."""
    if not isinstance(data, dict):
        raise ArtifactError(f"{where}: expected a JSON object at the top level")
    for key in REQUIRED:
        if key not in data:
            raise ArtifactError(f"{where}: missing key {key!r}")
    if data["schema"] != SCHEMA:
        raise ArtifactError(f"{where}: schema: expected {SCHEMA!r}, got {data['schema']!r}")
    target, family = data["target"], data["family"]
    if target not in TARGETS:
        raise ArtifactError(f"{where}: target: expected one of {', '.join(TARGETS)}, got {target!r}")
    if family not in TARGETS[target]:
        raise ArtifactError(f"{where}: family: {family!r} is not a {target} family "
                            f"({', '.join(TARGETS[target])})")
    if not isinstance(data["coefficients"], dict) or not data["coefficients"]:
        raise ArtifactError(f"{where}: coefficients: expected a non-empty object")
    _check_numbers(data["coefficients"], "coefficients", where)
    dom = data["validity_domain"]
    if not isinstance(dom, dict):
        raise ArtifactError(f"{where}: validity_domain: expected an object")
    for dim, rng in dom.items():
        ok = isinstance(rng, list) and len(rng) == 2 and all(
            isinstance(x, int | float) and not isinstance(x, bool) and not math.isnan(x) for x in rng)
        if not ok or rng[0] > rng[1]:
            raise ArtifactError(f"{where}: validity_domain.{dim}: expected [lo, hi], got {rng!r}")
    for key in ("fit_quality", "provenance"):
        if not isinstance(data[key], dict):
            raise ArtifactError(f"{where}: {key}: expected an object")
    return data


def write_artifact(path: str | os.PathLike, data: dict) -> None:
    """Validate and write atomically: a temp file in the same folder, then os.replace."""
    path = os.fspath(path)
    validate_artifact(data, path)
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n")


def read_artifact(path: str | os.PathLike) -> dict:
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return validate_artifact(data, path)


def domain_of(data: dict, name: str, strict: bool) -> ValidityDomain:
    ranges = {d: (float(lo), float(hi)) for d, (lo, hi) in data["validity_domain"].items()}
    return ValidityDomain(model=name, ranges=ranges, strict=strict)


def _check_fitted_for(data: dict, path: str, model: str, layout: dict[str, int]) -> None:
    """Layout-specific fits (psrl, distserve, roofline efficiencies, training) name what they fit."""
    ff = data.get("fitted_for") or {}
    if ff.get("model") and model_arch(ff["model"]).name != model_arch(model).name:
        raise ArtifactError(f"{path}: fitted_for.model is {ff['model']!r} but the run deploys {model!r}; "
                            "refit for this model or use a family that predicts from shape (composed)")
    for key, val in layout.items():
        if key in ff and int(ff[key]) != int(val):
            raise ArtifactError(f"{path}: fitted_for.{key}={ff[key]} but the run uses {key}={val}")


def load_rollout_artifact(path: str | os.PathLike, cfg):
    """A `RolloutCost` for ``cfg.deployment`` (model and rollout layout) from an artifact file."""
    from simrl.cost.fit import build_rollout  # the builders live with the fitters

    data = read_artifact(path)
    if data["target"] != "rollout":
        raise ArtifactError(f"{path}: target is {data['target']!r}, expected 'rollout'")
    ro = cfg.deployment.rollout
    if data["family"] != "composed":
        _check_fitted_for(data, os.fspath(path), cfg.deployment.model, {"tp": ro.tp, "pp": ro.pp})
    return build_rollout(data, cfg)


def load_training_artifact(path: str | os.PathLike, cfg):
    """A `TrainingCost` for ``cfg.deployment.training`` from an artifact file."""
    from simrl.cost.fit import build_training

    data = read_artifact(path)
    if data["target"] != "training":
        raise ArtifactError(f"{path}: target is {data['target']!r}, expected 'training'")
    if data["family"] in ("fixed", "linear"):
        _check_fitted_for(data, os.fspath(path), cfg.deployment.model, {})
    return build_training(data, cfg)


def load_weight_sync_artifact(path: str | os.PathLike, cfg):
    """A `WeightSyncCost` publishing ``cfg.deployment.model``'s weights, from an artifact file."""
    from simrl.cost.fit import build_weight_sync

    data = read_artifact(path)
    if data["target"] != "weight_sync":
        raise ArtifactError(f"{path}: target is {data['target']!r}, expected 'weight_sync'")
    return build_weight_sync(data, cfg)
