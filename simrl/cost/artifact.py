"""Cost-model artifacts: the versioned JSON a fit writes and a run reads once at start.

Keys: ``schema`` ("simrl.cost-artifact.v1"), ``target`` (rollout / training / weight_sync),
``family``, ``coefficients`` (family-specific, every number finite and >= 0),
``validity_domain`` ({dimension: [lo, hi]}), ``fit_quality`` (errors, k-fold results),
``provenance`` (observation files and sources, hardware, a label such as "fitted on real data"
or "analytical"), and optional ``fitted_for`` (the model / layout a layout-specific fit belongs
to). `read_artifact` rejects a wrong schema, a missing key and NaN, infinite or negative
coefficients with the file and key path. `write_artifact` is atomic (temp file + os.replace).
This module is the file format only: it knows the targets but not the families (the family
registry, `simrl.cost.registry`, checks the family name and its coefficients, and
`simrl.cost.build.load_artifact` turns a file into a cost-model object for a `SimConfig`).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from simrl.atomic import atomic_write
from simrl.cost.base import CostModelError, ValidityDomain

SCHEMA = "simrl.cost-artifact.v1"
TARGETS = ("rollout", "training", "weight_sync")
REQUIRED = ("schema", "target", "family", "coefficients", "validity_domain", "fit_quality", "provenance")
OPTIONAL = ("fitted_for",)
FITTED_FOR_KEYS = ("model", "gpu", "tp", "pp")  # what `simrl.cost.family.run_layout` compares


def check_keys(obj: dict, known, where: str, path: str) -> None:
    """An `ArtifactError` naming the first key of ``obj`` that is not in ``known`` (a typo such as
    ``compute_efficency`` would otherwise be ignored while the default is used)."""
    from simrl.strictio import unknown_field_message

    extra = sorted(set(obj) - set(known), key=str)
    if extra:
        key = f"{path}.{extra[0]}" if path else str(extra[0])
        raise ArtifactError(f"{where}: {key}: {unknown_field_message(extra[0], known)}")


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


PROVENANCE_KEYS = ("label", "observation_files", "n_observations", "sources", "hardware")


def _check_provenance(prov: dict, where: str) -> None:
    """The provenance keys a run reads (its cost-provenance table): what `simrl.cost.fit` writes."""
    check_keys(prov, PROVENANCE_KEYS, where, "provenance")
    strings = (lambda v: isinstance(v, str), "a string")
    str_list = (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings")
    count = (lambda v: type(v) is int and v >= 0, "a whole number >= 0")
    hardware = (lambda v: strings[0](v) or str_list[0](v), "a string or a list of strings")
    for key, (ok, what) in {"label": strings, "observation_files": str_list, "n_observations": count,
                            "sources": str_list, "hardware": hardware}.items():
        if key in prov and prov[key] is not None and not ok(prov[key]):
            raise ArtifactError(f"{where}: provenance.{key}: expected {what} (or null), "
                                f"got {type(prov[key]).__name__} ({prov[key]!r:.40})")


def validate_artifact(data: Any, where: str = "<artifact>") -> dict:
    """Check structure and coefficients; returns ``data`` or raises `ArtifactError`."""
    if not isinstance(data, dict):
        raise ArtifactError(f"{where}: expected a JSON object at the top level")
    for key in REQUIRED:
        if key not in data:
            raise ArtifactError(f"{where}: missing key {key!r}")
    check_keys(data, REQUIRED + OPTIONAL, where, "")
    if data["schema"] != SCHEMA:
        raise ArtifactError(f"{where}: schema: expected {SCHEMA!r}, got {data['schema']!r}")
    target, family = data["target"], data["family"]
    if target not in TARGETS:
        raise ArtifactError(f"{where}: target: expected one of {', '.join(TARGETS)}, got {target!r}")
    if not isinstance(family, str) or not family:
        raise ArtifactError(f"{where}: family: expected a family name, got {family!r}")
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
    _check_provenance(data["provenance"], where)
    if not isinstance(data.get("fitted_for", {}), dict):
        raise ArtifactError(f"{where}: fitted_for: expected an object")
    check_keys(data.get("fitted_for", {}), FITTED_FOR_KEYS, where, "fitted_for")
    return data


def write_artifact(path: str | os.PathLike, data: dict) -> None:
    """Validate and write atomically: a temp file in the same folder, then os.replace."""
    path = os.fspath(path)
    validate_artifact(data, path)
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n")


def read_artifact(path: str | os.PathLike) -> dict:
    from simrl.strictio import load_json_file

    path = os.fspath(path)

    def fail(line: int, field: str | None, message: str) -> ArtifactError:
        where = f"{path}:{line}" if line else path
        return ArtifactError(f"{where}: {field + ': ' if field else ''}{message}")

    # strict: non-UTF-8 bytes, duplicate keys, NaN/infinity and nesting too deep are named errors
    return validate_artifact(load_json_file(path, fail), path)


def domain_of(data: dict, name: str, strict: bool) -> ValidityDomain:
    ranges = {d: (float(lo), float(hi)) for d, (lo, hi) in data["validity_domain"].items()}
    return ValidityDomain(model=name, ranges=ranges, strict=strict)


_KINDS = {"number": (int, float), "positive": (int, float), "string": (str,), "object": (dict,), "list": (list,),
          "numbers": (list,)}
_SHOWN = {"positive": "number > 0", "numbers": "non-empty list of numbers"}


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def check_coefficients(coefs: Any, spec: dict[str, str], where: str, path: str = "coefficients") -> None:
    """Check the coefficient keys a family reads, at ``path`` (``coefficients`` or a nested
    object such as ``coefficients.kernel_db.operators.add``): ``{key: kind}`` with kind
    ``number``, ``positive`` (a number > 0), ``string``, ``object``, ``list`` or ``numbers`` (a
    non-empty list of numbers); ``?`` for optional and ``|null`` to allow null. A key the spec
    does not name is an error (an empty spec checks nothing). Raises `ArtifactError` naming
    ``where`` (the file) and the key path."""
    if not isinstance(coefs, dict):
        raise ArtifactError(f"{where}: {path}: expected an object, got {type(coefs).__name__} ({coefs!r:.40})")
    if spec:
        check_keys(coefs, spec, where, path)
    for key, kind in spec.items():
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        nullable = kind.endswith("|null")
        kind = kind.removesuffix("|null")
        shown = _SHOWN.get(kind, kind)
        if key not in coefs:
            if optional:
                continue
            raise ArtifactError(f"{where}: {path}.{key}: missing (expected {_a(shown)})")
        val = coefs[key]
        if val is None and nullable:
            continue
        bad = isinstance(val, bool) or not isinstance(val, _KINDS[kind])
        if not bad and kind == "positive":
            bad = not val > 0
        if not bad and kind == "numbers":
            bad = not val or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in val)
        if bad:
            raise ArtifactError(f"{where}: {path}.{key}: expected {_a(shown)}, "
                                f"got {type(val).__name__} ({val!r:.40})")
