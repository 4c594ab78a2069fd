#!/usr/bin/env bash
# Time one layer's operators with torch -> composed rollout model -> simulation.
# CPU here (a pipeline check, not GPU kernel times); on a GPU machine use DEVICE=cuda (CUDA events).
source "$(dirname "$0")/_common.sh"
DEVICE="${DEVICE:-cpu}"
MODEL="${MODEL:-microsoft/phi-2}"
setup_venv "torch==2.13.0"  # the CPU wheel on this project's machines; on a GPU machine: third_party/install.sh --only torch
step "1. time the operators ($DEVICE)"
if [[ "$DEVICE" == cpu ]]; then
  "$BIN/srl-profile" kernels --model "$MODEL" --device cpu --tokens 1,16,128 --repeats 3 --threads 1 -o "$OUT/kernels.jsonl"
else
  "$BIN/srl-profile" kernels --model "$MODEL" --device "$DEVICE" -o "$OUT/kernels.jsonl"
fi
step "2. fit the composed model on them plus the shipped collectives"
"$BIN/srl-profile" import vidur "$ROOT/simrl/cost/data/vidur/network" -o "$OUT/collectives.jsonl"
"$BIN/srl-regress" fit --family composed --obs "$OUT/kernels.jsonl" --obs "$OUT/collectives.jsonl" -o "$OUT/kernels-composed.json"
step "3. simulate with it"
"$BIN/srl" deployment.model="$MODEL" cost.rollout="$OUT/kernels-composed.json" \
  run.training_steps=2 workload.groups=16 run.output_dir="$OUT/runs" run.name=kernels-composed
