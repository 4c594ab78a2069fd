#!/usr/bin/env bash
# Activate a native ART environment provisioned by scripts/setup_art.sh, then exec the command.
# Needs RL_BENCH_ENV_ROOT (the prefix) and CUDA_HOME (CUDA 12.8 toolkit). Exports the prefix's
# setup_manifests/ so the controller retains them with the run evidence. Changes nothing on disk.
set -euo pipefail
ROOT="${RL_BENCH_ENV_ROOT:?set RL_BENCH_ENV_ROOT to the absolute prefix made by scripts/setup_art.sh}"
case "$ROOT" in /*) ;; *) echo "art_env.sh: RL_BENCH_ENV_ROOT must be absolute" >&2; exit 2;; esac
: "${CUDA_HOME:?set CUDA_HOME to the CUDA 12.8 toolkit (e.g. /usr/local/cuda-12.8)}"
VENV="$ROOT/art/.venv"
[ -x "$VENV/bin/python" ] || { echo "art_env.sh: no ART venv at $VENV" >&2; exit 2; }
[ -f "$ROOT/setup_manifests/setup_art.json" ] || { echo "art_env.sh: $ROOT/setup_manifests/setup_art.json missing" >&2; exit 2; }
export VIRTUAL_ENV="$VENV"
export PATH="$VENV/bin:$CUDA_HOME/bin:$PATH"
export LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RL_BENCH_SETUP_MANIFESTS="$ROOT/setup_manifests"
export CUDA_DEVICE_ORDER=PCI_BUS_ID
[ "$#" -gt 0 ] || { echo "usage: art_env.sh COMMAND..." >&2; exit 2; }
exec "$@"
