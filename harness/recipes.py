"""Recipe identity and container commands: the hashes an image bakes and the controller checks.

``python_sha256`` covers the benchmark Python (harness/ and workloads/ sources); a backend's
``recipe_sha256`` covers its Dockerfile, native env wrapper and setup script. `bench build`
bakes both as image labels and environment; the container preflight reads them back with
``docker image inspect`` and refuses a missing or stale identity before any GPU is leased.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from harness.errors import BenchError

ROOT = Path(__file__).resolve().parent.parent
PYTHON_DIRS = ("harness", "workloads")
LABEL_PYTHON = "org.rl-bench.python_sha256"
LABEL_RECIPE = "org.rl-bench.recipe_sha256"


def recipe_files(backend: str) -> list[str]:
    return [f"containers/{backend}.Dockerfile", f"containers/{backend}_env.sh", f"scripts/setup_{backend}.sh"]


def _digest(root: Path, rels: list[str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(rels):
        path = root / rel
        if not path.is_file():
            raise BenchError(f"recipe file {rel} is missing from {root}")
        h.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return h.hexdigest()


def python_sha256(root: Path = ROOT) -> str:
    rels = [str(p.relative_to(root)) for d in PYTHON_DIRS for p in (root / d).rglob("*.py")
            if "__pycache__" not in p.parts]
    return _digest(root, rels)


def recipe_sha256(backend: str, root: Path = ROOT) -> str:
    return _digest(root, recipe_files(backend))


def source_provenance(root: Path = ROOT) -> dict:
    """What `--source-provenance` files hold: the controller's expected identity per backend."""
    return {"source_sha256": python_sha256(root),
            "recipe_sha256": {b: recipe_sha256(b, root) for b in ("art", "skyrl")}}


def image_tag(backend: str, root: Path = ROOT) -> str:
    return f"rl-bench-{backend}:{recipe_sha256(backend, root)[:12]}-{python_sha256(root)[:12]}"


def build_command(backend: str, root: Path = ROOT, engine: str = "docker") -> list[str]:
    return [engine, "build", "-f", f"containers/{backend}.Dockerfile",
            "--build-arg", f"BENCH_PYTHON_SHA256={python_sha256(root)}",
            "--build-arg", f"BENCH_RECIPE_SHA256={recipe_sha256(backend, root)}",
            "-t", image_tag(backend, root), "."]


def engine_problem(engine: str = "docker") -> str | None:
    """None when a container engine answers; otherwise why not, in a sentence."""
    if not shutil.which(engine):
        return f"{engine} is not installed on this host"
    try:
        proc = subprocess.run([engine, "info", "--format", "{{json .ServerVersion}}"], capture_output=True,
                              text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{engine} did not answer: {exc}"
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()
        return f"no {engine} daemon is running here ({first[0] if first else 'exit ' + str(proc.returncode)})"
    return None


def image_labels(image: str, engine: str = "docker") -> dict:
    proc = subprocess.run([engine, "image", "inspect", image, "--format", "{{json .Config.Labels}}"],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise BenchError(f"image {image} not found; build it with `bench build` ({proc.stderr.strip()[:200]})")
    return json.loads(proc.stdout or "null") or {}


def preflight_container(backend: str, image: str | None = None, root: Path = ROOT, engine: str = "docker") -> dict:
    """Compare the image's baked hashes with the controller's; raise before any lease if they differ."""
    problem = engine_problem(engine)
    if problem:
        raise BenchError(f"container runtime unavailable: {problem}. Use --runtime native or sim, "
                         "or run on a host with Docker and the NVIDIA Container Toolkit.")
    image = image or image_tag(backend, root)
    labels = image_labels(image, engine)
    expected = {"python": python_sha256(root), "recipe": recipe_sha256(backend, root)}
    baked = {"python": labels.get(LABEL_PYTHON), "recipe": labels.get(LABEL_RECIPE)}
    for what in ("python", "recipe"):
        if not baked[what]:
            raise BenchError(f"image {image} has no baked {what} hash; rebuild with `bench build --backend {backend}`")
        if baked[what] != expected[what]:
            raise BenchError(f"image {image} is stale: baked {what} hash {baked[what][:12]} != controller "
                             f"{expected[what][:12]}; rebuild with `bench build --backend {backend}`")
    return {"image": image, "baked": baked, "expected": expected,
            "image_id": _image_id(image, engine)}


def _image_id(image: str, engine: str) -> str | None:
    proc = subprocess.run([engine, "image", "inspect", image, "--format", "{{.Id}}"], capture_output=True,
                          text=True, timeout=60, check=False)
    return proc.stdout.strip() or None


def container_run_command(image: str, uuids: list[str], run_dir: Path, hf_cache: str | None,
                          cuda_compat: bool, engine: str = "docker", name: str | None = None) -> list[str]:
    """docker run for the worker: only the run dir and the HF cache are mounted, nothing else.

    The HF cache is mounted read-only at its host path, so the run dir's ``model`` symlink to the
    pinned snapshot resolves the same inside the container. ``name`` lets the controller stop it.
    """
    cmd = [engine, "run", "--rm", "--gpus", f'"device={",".join(uuids)}"', "--ipc=host", "--shm-size=64g",
           "-v", f"{run_dir}:{run_dir}", "-e", "CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    if name:
        cmd += ["--name", name]
    if hf_cache:
        cmd += ["-v", f"{hf_cache}:{hf_cache}:ro", "-e", f"HF_HOME={hf_cache}"]
    if cuda_compat:
        cmd += ["-e", "SKYRL_USE_CUDA_COMPAT=1"]
    return [*cmd, image, "python", "-m", "harness.worker", "--context", str(Path(run_dir) / "context.json")]
