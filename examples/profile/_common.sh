# Sourced by the examples: the repository root, its venv's commands, and an output folder.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-$ROOT/outputs/profile-examples}"
BIN="$ROOT/.venv/bin"
mkdir -p "$OUT"
step() { printf '\n== %s\n' "$*"; }
setup_venv() {  # a bare machine: the venv with simrl (make setup), plus what the example needs
  [[ -x "$BIN/srl" ]] || make -C "$ROOT" setup
  if [[ $# -gt 0 ]]; then "$BIN/pip" install -q "$@"; fi
}
