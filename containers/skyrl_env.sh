#!/usr/bin/env bash
# Activate a native SkyRL environment provisioned by scripts/setup_skyrl.sh, then exec the command.
# SKYRL_USE_CUDA_COMPAT=1 puts the venv's packaged NVIDIA CUDA compatibility libraries first on
# LD_LIBRARY_PATH (only on a qualified older-driver host); it fails if they are not installed.
set -euo pipefail
ROOT="${RL_BENCH_ENV_ROOT:?set RL_BENCH_ENV_ROOT to the absolute prefix made by scripts/setup_skyrl.sh}"
case "$ROOT" in /*) ;; *) echo "skyrl_env.sh: RL_BENCH_ENV_ROOT must be absolute" >&2; exit 2;; esac
VENV="$ROOT/skyrl/.venv"
[ -x "$VENV/bin/python" ] || { echo "skyrl_env.sh: no SkyRL venv at $VENV" >&2; exit 2; }
[ -f "$ROOT/setup_manifests/setup_skyrl.json" ] || { echo "skyrl_env.sh: $ROOT/setup_manifests/setup_skyrl.json missing" >&2; exit 2; }
export VIRTUAL_ENV="$VENV"
export PATH="$VENV/bin:$PATH"
if [ "${SKYRL_USE_CUDA_COMPAT:-0}" = "1" ]; then
  COMPAT="$(find "$VENV" -path '*compat*' -name 'libcuda.so*' -printf '%h\n' 2>/dev/null | sort -u | head -n1)"
  [ -n "$COMPAT" ] || { echo "skyrl_env.sh: SKYRL_USE_CUDA_COMPAT=1 but no packaged compat libcuda in $VENV" >&2; exit 2; }
  export LD_LIBRARY_PATH="$COMPAT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "skyrl_env.sh: CUDA compat libraries from $COMPAT" >&2
fi
export RL_BENCH_SETUP_MANIFESTS="$ROOT/setup_manifests"
export CUDA_DEVICE_ORDER=PCI_BUS_ID
[ "$#" -gt 0 ] || { echo "usage: skyrl_env.sh COMMAND..." >&2; exit 2; }
exec "$@"
