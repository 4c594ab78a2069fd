#!/usr/bin/env bash
# Provision a fresh native skyrl environment under PREFIX ($1 or $RL_BENCH_ENV_ROOT) at the commit the driver
# was checked against (harness/pins.py UPSTREAM["skyrl"]),
# install this benchmark package into it, and record what was done in PREFIX/setup_manifests/.
# It refuses a non-empty PREFIX: it never repairs or mutates an existing environment.
set -euo pipefail
PREFIX="${1:-${RL_BENCH_ENV_ROOT:?give PREFIX or set RL_BENCH_ENV_ROOT}}"
COMMIT="a9564572eb8e91076be43c1bd5e4615e3de17265"
REPO="https://github.com/NovaSky-AI/SkyRL.git"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -e "$PREFIX/skyrl" ]; then echo "setup_skyrl.sh: $PREFIX/skyrl exists; use a fresh prefix" >&2; exit 2; fi
command -v uv >/dev/null || { echo "setup_skyrl.sh: uv is required" >&2; exit 2; }
mkdir -p "$PREFIX/setup_manifests"
git clone --filter=blob:none "$REPO" "$PREFIX/skyrl"
git -C "$PREFIX/skyrl" checkout --detach "$COMMIT"
test "$(git -C "$PREFIX/skyrl" rev-parse HEAD)" = "$COMMIT"
( cd "$PREFIX/skyrl" && UV_PYTHON=3.12 uv sync --frozen --extra megatron )
uv pip install --python "$PREFIX/skyrl/.venv/bin/python" --no-deps "$HERE"
"$PREFIX/skyrl/.venv/bin/python" - "$PREFIX" "$COMMIT" <<'PY'
import json, platform, subprocess, sys, time
prefix, commit = sys.argv[1], sys.argv[2]
from harness.recipes import python_sha256, recipe_sha256
freeze = subprocess.run(["uv", "pip", "freeze", "--python", sys.executable], capture_output=True, text=True).stdout
record = {"backend": "skyrl", "commit": commit, "python": platform.python_version(), "created_unix": time.time(),
          "uv": subprocess.run(["uv", "--version"], capture_output=True, text=True).stdout.strip(),
          "bench_python_sha256": python_sha256(), "bench_recipe_sha256": recipe_sha256("skyrl"),
          "packages": freeze.splitlines()}
path = f"{prefix}/setup_manifests/setup_skyrl.json"
with open(path + ".tmp", "w") as fh:
    json.dump(record, fh, indent=1, sort_keys=True)
import os; os.replace(path + ".tmp", path)
print(f"wrote {path}")
PY
