"""The run manifest (schema ``bench.manifest.v1``): its skeleton, its required keys, its check.

A manifest is written when the run directory is made (status ``running``) and rewritten
atomically as the run proceeds, so an aborted run still leaves one naming what went wrong.
"""

from __future__ import annotations

import platform
import socket
import subprocess
import time
from pathlib import Path

from harness import pins as P
from harness.errors import ManifestError
from harness.recipes import ROOT

SCHEMA = "bench.manifest.v1"
STATUSES = ("running", "valid", "invalid", "aborted")
REQUIRED = {
    "schema": str,
    "identity": dict,
    "pins": dict,
    "model": dict,
    "workload": dict,
    "pipeline": dict,
    "contract": dict,
    "hardware": dict,
    "lease": dict,
    "results": dict,
    "validation": dict,
    "status": str,
    "reasons": list,
}
REQUIRED_IDENTITY = ("run_id", "suite", "backend", "workload", "runtime", "created_at", "argv",
                     "harness_commit", "dirty", "backend_commit", "requested_recipe_sha256", "python_sha256")
REQUIRED_MODEL = ("name", "revision", "dtype", "lora", "chat_template_kwargs")


# The sections that are final once the backend has finished and the evidence is hashed; what
# the controller writes after that (results, verdict, status, the lease's release) is not sealed.
SEALED_SECTIONS = ("schema", "identity", "pins", "model", "workload", "pipeline", "contract", "hardware", "lease",
                   "provenance", "clock", "backend_outcome", "worker", "evidence")


# Every top-level key the controller writes (sealed, then the ones it writes after the seal).
TOP_LEVEL = (*SEALED_SECTIONS, "results", "validation", "status", "reasons")


_SNAPSHOT_KEYS = ("time_unix", "threshold_mib", "raw", "gpus", "clean", "problems")
# Sections whose keys the controller writes in full (run.py, nvsmi.occupancy, BackendOutcome): any
# other key is no writer's, and a reader could act on what validation never looked at.
CLOSED: dict[str, tuple[str, ...]] = {
    "lease": ("lease_id", "run_id", "state_dir", "gpu_uuids", "verified_at_end", "released"),
    "lease.verified_at_end": ("held", "problems"),
    "hardware": ("requested", "gpus", "trainer_uuids", "inference_uuids", "occupancy_before", "occupancy_after"),
    "hardware.occupancy_before": _SNAPSHOT_KEYS, "hardware.occupancy_after": _SNAPSHOT_KEYS,
    "hardware.occupancy_before.raw": ("query_gpu", "query_compute_apps"),
    "hardware.occupancy_after.raw": ("query_gpu", "query_compute_apps"),
    "validation": ("verdict", "checks", "reasons"),
    "worker": ("pid", "pgid", "started_unix", "container"),
    "backend_outcome": ("exit_code", "native_config", "backend_version", "autotuner", "notes", "clock"),
    "clock": ("kind", "origin_unix", "end_s"),
}


def _sealed(manifest: dict) -> dict:
    sealed = {k: manifest.get(k) for k in SEALED_SECTIONS}
    if isinstance(sealed["lease"], dict):
        sealed["lease"] = {k: v for k, v in sealed["lease"].items() if k != "released"}
    return sealed


def _digest(obj) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()).hexdigest()


def sealed_sha256(manifest: dict) -> str:
    """sha256 of the sealed sections (canonical JSON), as the controller logs it when the backend
    is done (run.log and the lease history); validation recomputes it from the manifest."""
    return _digest(_sealed(manifest))


def sealed_section_digests(manifest: dict) -> dict[str, str]:
    """The first 16 hex digits of each sealed section's sha256 (to name what was edited)."""
    return {k: _digest(v)[:16] for k, v in _sealed(manifest).items()}


def git_identity(root: Path = ROOT) -> tuple[str | None, bool | None]:
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head, bool(dirty)


def skeleton(*, run_id: str, suite: str | None, backend: str, workload: str, runtime: str, rank: int,
             argv: list[str], settings: dict, requested_recipe_sha256: str, python_sha256: str) -> dict:
    commit, dirty = git_identity()
    return {
        "schema": SCHEMA,
        "identity": {
            "run_id": run_id, "lease_id": None, "suite": suite, "backend": backend, "workload": workload,
            "runtime": runtime, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "created_at_unix": time.time(), "argv": list(argv), "harness_commit": commit, "dirty": dirty,
            "backend_commit": P.source_id(backend),
            "backend_version": None, "container_image_digest": None,
            "requested_recipe_sha256": requested_recipe_sha256, "recipe_sha256_baked": None,
            "python_sha256": python_sha256, "host": socket.gethostname(), "platform": platform.platform(),
        },
        "pins": P.pins(),
        "model": {
            "name": P.MODEL, "revision": P.MODEL_REVISION, "dtype": P.DTYPE, "lora": P.lora_settings(rank),
            "chat_template_kwargs": dict(P.CHAT_TEMPLATE_KWARGS), "max_seq_length": P.MAX_SEQ_LENGTH,
        },
        "workload": {},
        "pipeline": dict(settings),
        "contract": dict(P.CONTRACT),
        "hardware": {},
        "lease": {},
        "provenance": {},
        "results": {},
        "validation": {},
        "status": "running",
        "reasons": [],
    }


_NUM = (int, float)
_OPT_STR = (str, type(None))
# The type of every field validation or the report reads, by dotted path; checked when present.
TYPES: dict[str, type | tuple] = {
    **REQUIRED, "evidence": dict, "clock": (dict, type(None)), "worker": dict, "backend_outcome": dict,
    "identity.run_id": str, "identity.lease_id": _OPT_STR, "identity.backend": str, "identity.workload": str,
    "identity.runtime": str, "identity.skyrl_batch_size": (int, type(None)), "identity.created_at_unix": _NUM,
    "identity.backend_started_unix": _NUM, "identity.backend_finished_unix": _NUM,
    "model.lora": dict, "model.lora.rank": int, "model.revision": str, "model.snapshot": dict,
    "workload.name": str, "workload.seed": int, "workload.groups": int, "workload.schedule_sha256": str,
    "workload.knobs": dict, "workload.group_size": (int, type(None)),
    "pipeline.groups_per_update": int, "pipeline.staleness_bound": int, "pipeline.trainer_ranks": int,
    "hardware.occupancy_before": dict, "hardware.occupancy_after": dict, "hardware.trainer_uuids": list,
    "hardware.inference_uuids": list, "lease.lease_id": str, "lease.run_id": str, "lease.gpu_uuids": list,
    "lease.verified_at_end": dict, "results.headline": dict, "results.measured": dict,
    "results.secondary": dict, "results.per_update": list, "backend_outcome.exit_code": int,
    "clock.kind": str, "clock.origin_unix": _NUM, "clock.end_s": _NUM,
    "hardware.occupancy_before.raw": (dict, type(None)), "hardware.occupancy_after.raw": (dict, type(None)),
    "hardware.occupancy_before.raw.query_gpu": str, "hardware.occupancy_before.raw.query_compute_apps": str,
    "hardware.occupancy_after.raw.query_gpu": str, "hardware.occupancy_after.raw.query_compute_apps": str,
    "hardware.occupancy_before.time_unix": _NUM, "hardware.occupancy_after.time_unix": _NUM,
    "pipeline.native_config": (dict, type(None)),
    # flags read for their truth: a string "false" is truthy, so only a JSON boolean counts
    "lease.verified_at_end.held": bool, "lease.verified_at_end.problems": list, "lease.released": bool,
    "hardware.occupancy_before.clean": bool, "hardware.occupancy_after.clean": bool,
    "hardware.occupancy_before.problems": list, "hardware.occupancy_after.problems": list,
    "validation.verdict": str, "validation.checks": list, "validation.reasons": list,
}
# The element type of the lists validation reads element by element (a number among the GPU UUIDs
# was a TypeError traceback when they were sorted).
ELEMENT_TYPES: dict[str, type] = {
    "hardware.trainer_uuids": str, "hardware.inference_uuids": str, "lease.gpu_uuids": str, "reasons": str,
    "identity.argv": str,
}


def _type_name(typ) -> str:
    names = [t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,))]
    return " or ".join("null" if n == "NoneType" else {"dict": "object", "list": "array", "str": "string",
                                                        "int": "integer", "float": "number"}.get(n, n)
                       for n in names)


def load(path: Path) -> dict:
    """The manifest at ``path``; not JSON, not an object, or a mistyped field is a ManifestError naming both."""
    from workloads.strictio import load_json_file

    def fail(line: int, field: str | None, message: str) -> ManifestError:
        where = f"{path}:{line}" if line else f"{path}"
        return ManifestError(f"{where}: {f'key {field!r}: ' if field else ''}{message}")

    from harness.fsio import special_kind

    kind = special_kind(path)
    if kind:
        raise ManifestError(f"{path}: {kind}, not a regular file")
    # strict JSON: a duplicate key (two readers could see two different manifests), NaN or
    # infinity, non-UTF-8 bytes and nesting too deep are refused, naming the line or key
    man = load_json_file(path, fail)
    if not isinstance(man, dict):
        raise ManifestError(f"{path}: the top level must be an object, got {type(man).__name__}")
    for dotted, typ in TYPES.items():
        node, ok = man, True
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                ok = False
                break
            node = node[part]
        if not ok:
            continue
        is_bool = isinstance(node, bool)
        if not isinstance(node, typ) or (is_bool and bool not in (typ if isinstance(typ, tuple) else (typ,))):
            raise ManifestError(f"{path}: key {dotted!r} must be {_type_name(typ)}, got {type(node).__name__}")
    for dotted, typ in ELEMENT_TYPES.items():
        node = man
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, list):
            for i, x in enumerate(node):
                if not isinstance(x, typ) or isinstance(x, bool):
                    raise ManifestError(f"{path}: key '{dotted}[{i}]' must be {_type_name(typ)}, "
                                        f"got {type(x).__name__} ({x!r:.40})")
    return man


def problems(manifest: dict) -> list[str]:
    """Schema problems: missing or mistyped keys, unknown schema or status."""
    out = []
    for key, typ in REQUIRED.items():
        if key not in manifest:
            out.append(f"missing key {key!r}")
        elif not isinstance(manifest[key], typ):
            out.append(f"{key!r} must be {typ.__name__}")
    if out:
        return out
    unknown = sorted(set(manifest) - set(TOP_LEVEL), key=str)
    if unknown:  # a field no writer of this schema writes: readers could act on what validation never saw
        out.append(f"unknown top-level key {unknown[0]!r} (bench.manifest.v1 has {', '.join(TOP_LEVEL)})")
    for dotted, keys in CLOSED.items():
        node = manifest
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        extra = sorted(set(node) - set(keys), key=str) if isinstance(node, dict) else []
        if extra:
            out.append(f"unknown key {dotted}.{extra[0]} (the harness writes only {', '.join(keys)} there)")
    if manifest["schema"] != SCHEMA:
        out.append(f"schema {manifest['schema']!r} != {SCHEMA!r}")
    if manifest["status"] not in STATUSES:
        out.append(f"status {manifest['status']!r} not one of {STATUSES}")
    out += [f"identity.{k} missing" for k in REQUIRED_IDENTITY if k not in manifest["identity"]]
    out += [f"model.{k} missing" for k in REQUIRED_MODEL if k not in manifest["model"]]
    for key in ("schedule_sha256", "name", "seed", "groups"):
        if key not in manifest["workload"]:
            out.append(f"workload.{key} missing")
    for key in ("groups_per_update", "staleness_bound", "trainer_ranks"):
        if key not in manifest["pipeline"]:
            out.append(f"pipeline.{key} missing")
    return out
