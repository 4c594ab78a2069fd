#!/usr/bin/env bash
# On 32 H100s, is 20/12 with TP2 rollout better than 16/16 with TP4, and where is the training
# step no longer the bottleneck? One command: the sweep (1,248 points, ~1,000 feasible, real-data
# costs; a rich progress bar on a terminal), then the answer (answer.md, crossover.png).
#   bash examples/sweep/gpu32.sh [OUT]        (default OUT: outputs/gpu32)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${BIN:-$here/.venv/bin}"
out="${1:-outputs/gpu32}"
"$bin/srl-sweep" --space "$here/examples/sweep/gpu32.yaml" -o "$out"
"$bin/python" "$here/examples/sweep/answer_gpu32.py" "$out"
