#!/usr/bin/env bash
# Install the GPU stack the profilers drive, at the versions third_party/pins.json names:
#   1. torch      the PyTorch CUDA wheel vLLM's pinned commit requires (pip, from the pinned index)
#   2. vllm       clone vllm-project/vllm at the pinned commit into third_party/vllm
#   3. megatron   clone NVIDIA-NeMo/Megatron-Bridge at the pinned commit into third_party/Megatron-Bridge,
#                 with its 3rdparty/Megatron-LM submodule at the commit the bridge records
#   4. flash-attn build flash-attn from source against that torch (pip --no-build-isolation; needs nvcc)
#   5. editable   (only with --editable) pip install -e the two clones (vLLM with its precompiled kernels)
#
# Idempotent: a step whose result is already there (same torch version and CUDA, clone at the
# pinned commit, same flash-attn version) is skipped. A clone at another commit is refused, not
# overwritten. --dry-run prints the plan (what would run, what is already done) and changes nothing.
#
# Usage: third_party/install.sh [--dry-run] [--only STEP[,STEP...]] [--editable]
#                               [--python PY] [--pins FILE] [--dir DIR]
# Environment: PYTHON, THIRD_PARTY_DIR, TORCH_INDEX_URL (override the pinned index), MAX_JOBS (flash-attn).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PINS="$HERE/pins.json"
DIR="${THIRD_PARTY_DIR:-$HERE}"
DRY=0
EDITABLE=0
ONLY=""
if [[ -n "${PYTHON:-}" ]]; then PY="$PYTHON"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"
else PY="python3"; fi

die() { echo "install.sh: error: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --editable) EDITABLE=1 ;;
    --only) [[ $# -ge 2 ]] || die "--only needs a value"; ONLY="$2"; shift ;;
    --python) [[ $# -ge 2 ]] || die "--python needs a value"; PY="$2"; shift ;;
    --pins) [[ $# -ge 2 ]] || die "--pins needs a value"; PINS="$2"; shift ;;
    --dir) [[ $# -ge 2 ]] || die "--dir needs a value"; DIR="$2"; shift ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done

[[ -f "$PINS" ]] || die "$PINS: no such file"
command -v python3 >/dev/null || die "python3 is needed to read $PINS"

# Read every pin in one go: shell assignments, or an error naming the missing key.
PIN_VARS="$(python3 - "$PINS" <<'EOF'
import json, shlex, sys
path = sys.argv[1]
def die(msg):
    print(f"install.sh: error: {path}: {msg}", file=sys.stderr)
    sys.exit(2)
try:
    pins = json.load(open(path, encoding="utf-8"))
except (OSError, json.JSONDecodeError) as exc:
    die(str(exc))
wanted = {"TORCH_VERSION": "torch.version", "TORCH_CUDA": "torch.cuda", "TORCH_INDEX_PIN": "torch.index_url",
          "VLLM_REPO": "vllm.repo", "VLLM_TAG": "vllm.tag", "VLLM_COMMIT": "vllm.commit_prefix",
          "MB_REPO": "megatron_bridge.repo", "MB_COMMIT": "megatron_bridge.commit",
          "MLM_PATH": "megatron_bridge.submodule.path", "MLM_REPO": "megatron_bridge.submodule.repo",
          "MLM_COMMIT": "megatron_bridge.submodule.commit", "FA_VERSION": "flash_attn.version"}
for var, key in wanted.items():
    val = pins
    for part in key.split("."):
        if not isinstance(val, dict) or part not in val:
            die(f"missing key '{key}'")
        val = val[part]
    if isinstance(val, (dict, list, bool)) or val in (None, ""):
        die(f"key '{key}' must be a non-empty string or number")
    print(f"{var}={shlex.quote(str(val))}")
EOF
)"
eval "$PIN_VARS"
SHA_RE='^[0-9a-f]{40}$'
TORCH_INDEX="${TORCH_INDEX_URL:-$TORCH_INDEX_PIN}"
for c in "$MB_COMMIT" "$MLM_COMMIT"; do
  [[ "$c" =~ $SHA_RE ]] || die "$PINS: '$c' is not a 40-hex-digit commit"
done
[[ "$VLLM_COMMIT" =~ ^[0-9a-f]{7,40}$ ]] || die "$PINS: vllm.commit_prefix '$VLLM_COMMIT' is not 7-40 hex digits"

STEPS="torch,vllm,megatron,flash-attn"
[[ $EDITABLE == 1 ]] && STEPS="$STEPS,editable"
if [[ -n "$ONLY" ]]; then
  for s in ${ONLY//,/ }; do
    [[ ",torch,vllm,megatron,flash-attn,editable," == *",$s,"* ]] || die "--only: unknown step '$s' (torch, vllm, megatron, flash-attn, editable)"
  done
  STEPS="$ONLY"
fi
wants() { [[ ",$STEPS," == *",$1,"* ]]; }

say() { echo "$*"; }
run() {  # run a command, or print it under --dry-run
  if [[ $DRY == 1 ]]; then echo "  would run: $*"; else echo "  + $*"; "$@"; fi
}

# The version of an installed Python package, or empty.
pyver() {
  "$PY" - "$1" 2>/dev/null <<'EOF' || true
import importlib.metadata as m, sys
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass
EOF
}

# clone_at NAME REPO REF COMMIT DEST: a clone of REPO at REF (a full commit, or a tag) in DEST whose
# HEAD is COMMIT (a full commit, or its leading digits when REF is a tag).
clone_at() {
  local name="$1" repo="$2" ref="$3" commit="$4" dest="$5"
  if [[ -d "$dest/.git" || -f "$dest/.git" ]]; then
    local head
    head="$(git -C "$dest" rev-parse HEAD 2>/dev/null || true)"
    if [[ -n "$head" && "$head" == "$commit"* ]]; then
      say "[$name] already at $head in $dest"
      return 0
    fi
    die "$dest holds $name at ${head:-no commit}, not the pinned $commit; remove it or check out $ref"
  fi
  [[ -e "$dest" && -n "$(ls -A "$dest" 2>/dev/null)" ]] && die "$dest exists and is not a git clone"
  say "[$name] clone $repo at $ref ($commit) into $dest"
  local fetch_ref="$ref"
  [[ "$ref" =~ $SHA_RE ]] || fetch_ref="refs/tags/$ref"
  run git init -q "$dest"
  run git -C "$dest" remote add origin "$repo"
  run git -C "$dest" fetch -q --depth 1 origin "$fetch_ref"
  run git -C "$dest" -c advice.detachedHead=false checkout -q FETCH_HEAD
  if [[ $DRY == 0 ]]; then
    local got
    got="$(git -C "$dest" rev-parse HEAD)"
    [[ "$got" == "$commit"* ]] || { rm -rf "$dest"; die "$repo $ref is $got, not the pinned $commit; removed $dest"; }
  fi
}

say "third_party plan (pins: $PINS; python: $PY; into: $DIR)$([[ $DRY == 1 ]] && echo '; dry run: nothing is changed')"

if wants torch; then
  have="$(pyver torch)"
  # torch/version.py names the CUDA of the build; read it without importing torch (seconds).
  have_cuda="$("$PY" - 2>/dev/null <<'EOF' || true
import importlib.util, re
spec = importlib.util.find_spec("torch")
if spec and spec.submodule_search_locations:
    text = open(spec.submodule_search_locations[0] + "/version.py", encoding="utf-8").read()
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    print(m.group(1) if m else "")
EOF
)"
  want_cuda="${TORCH_CUDA#cu}"; want_cuda="${want_cuda:0:${#want_cuda}-1}.${want_cuda: -1}"  # cu130 -> 13.0
  if [[ "${have%%+*}" == "$TORCH_VERSION" && "$have_cuda" == "$want_cuda" ]]; then
    say "[torch] already $have (CUDA $have_cuda)"
  else
    say "[torch] install torch==$TORCH_VERSION ($TORCH_CUDA) from $TORCH_INDEX (found: ${have:-none}${have_cuda:+, CUDA $have_cuda})"
    run "$PY" -m pip install "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX"
  fi
fi

if wants vllm; then
  clone_at vllm "$VLLM_REPO" "$VLLM_TAG" "$VLLM_COMMIT" "$DIR/vllm"
fi

if wants megatron; then
  clone_at megatron-bridge "$MB_REPO" "$MB_COMMIT" "$MB_COMMIT" "$DIR/Megatron-Bridge"
  clone_at megatron-lm "$MLM_REPO" "$MLM_COMMIT" "$MLM_COMMIT" "$DIR/Megatron-Bridge/$MLM_PATH"
fi

if wants flash-attn; then
  have="$(pyver flash-attn)"
  if [[ "$have" == "$FA_VERSION" ]]; then
    say "[flash-attn] already $have"
  else
    say "[flash-attn] build flash-attn==$FA_VERSION against torch $TORCH_VERSION (found: ${have:-none}; MAX_JOBS=${MAX_JOBS:-4})"
    if [[ $DRY == 0 ]]; then
      command -v nvcc >/dev/null || die "flash-attn builds CUDA kernels: nvcc (the CUDA toolkit) is not on PATH"
      "$PY" -c 'import torch' 2>/dev/null || die "flash-attn builds against torch: install it first (step torch)"
    fi
    run env MAX_JOBS="${MAX_JOBS:-4}" "$PY" -m pip install "flash-attn==$FA_VERSION" --no-build-isolation
  fi
fi

if wants editable; then
  say "[editable] pip install -e the clones (vLLM with VLLM_USE_PRECOMPILED=1: its kernels from the matching wheel)"
  run env VLLM_USE_PRECOMPILED=1 "$PY" -m pip install -e "$DIR/vllm"
  run "$PY" -m pip install -e "$DIR/Megatron-Bridge/$MLM_PATH" -e "$DIR/Megatron-Bridge"
fi

say "done$([[ $DRY == 1 ]] && echo ' (dry run)')"
