#!/usr/bin/env bash
# Provision a fresh native art environment under PREFIX ($1 or $RL_BENCH_ENV_ROOT) from the ART source the
# driver was checked against (harness/pins.py UPSTREAM["art"]: the openpipe-art 0.5.18 sdist, sha256-verified),
# install this benchmark package into it, and record what was done in PREFIX/setup_manifests/.
# It refuses a non-empty PREFIX: it never repairs or mutates an existing environment. The sdist carries no
# lockfile, so dependencies resolve at setup time; the frozen package list is recorded.
set -euo pipefail
PREFIX="${1:-${RL_BENCH_ENV_ROOT:?give PREFIX or set RL_BENCH_ENV_ROOT}}"
VERSION="0.5.18"
SHA256="c1555143564b2dd26945ea5f8eb1ea9e2eae47d989c3de2e04bb88e8ffefe29a"
URL="https://files.pythonhosted.org/packages/source/o/openpipe-art/openpipe_art-${VERSION}.tar.gz"
COMMIT="openpipe-art==${VERSION}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -e "$PREFIX/art" ]; then echo "setup_art.sh: $PREFIX/art exists; use a fresh prefix" >&2; exit 2; fi
command -v uv >/dev/null || { echo "setup_art.sh: uv is required" >&2; exit 2; }
mkdir -p "$PREFIX/setup_manifests" "$PREFIX/dl"
curl -fsSL -o "$PREFIX/dl/openpipe_art-${VERSION}.tar.gz" "$URL"
echo "$SHA256  $PREFIX/dl/openpipe_art-${VERSION}.tar.gz" | sha256sum -c -
mkdir -p "$PREFIX/art"
tar -xzf "$PREFIX/dl/openpipe_art-${VERSION}.tar.gz" -C "$PREFIX/art" --strip-components=1
( cd "$PREFIX/art" && UV_PYTHON=3.11 uv sync --extra backend --extra megatron )
uv pip install --python "$PREFIX/art/.venv/bin/python" --no-deps "$HERE"
"$PREFIX/art/.venv/bin/python" - "$PREFIX" "$COMMIT" <<'PY'
import json, platform, subprocess, sys, time
prefix, commit = sys.argv[1], sys.argv[2]
from harness.recipes import python_sha256, recipe_sha256
freeze = subprocess.run(["uv", "pip", "freeze", "--python", sys.executable], capture_output=True, text=True).stdout
record = {"backend": "art", "commit": commit, "python": platform.python_version(), "created_unix": time.time(),
          "uv": subprocess.run(["uv", "--version"], capture_output=True, text=True).stdout.strip(),
          "bench_python_sha256": python_sha256(), "bench_recipe_sha256": recipe_sha256("art"),
          "packages": freeze.splitlines()}
path = f"{prefix}/setup_manifests/setup_art.json"
with open(path + ".tmp", "w") as fh:
    json.dump(record, fh, indent=1, sort_keys=True)
import os; os.replace(path + ".tmp", path)
print(f"wrote {path}")
PY
