#!/usr/bin/env bash
# Real H100 measurements -> composed rollout model -> simulation. Runs anywhere (no GPU, no network):
# the Vidur H100 data ships with simrl (simrl/cost/data/vidur, MIT, NOTICE with the commit).
# For other GPUs and models: srl-profile fetch vidur -o DIR, then pass DIR to `import vidur`.
source "$(dirname "$0")/_common.sh"
setup_venv
step "1. import the shipped Vidur CSVs as observations"
"$BIN/srl-profile" import vidur -o "$OUT/vidur.jsonl"
step "2. fit the composed rollout model (kernel DB + collectives), 5-fold cross-validated"
"$BIN/srl-regress" fit --family composed --obs "$OUT/vidur.jsonl" -o "$OUT/composed.json" --kfold 5
step "3. simulate Llama-2-7B rollouts with it"
"$BIN/srl" deployment.model=meta-llama/Llama-2-7b-hf cost.rollout="$OUT/composed.json" \
  run.training_steps=2 workload.groups=16 run.output_dir="$OUT/runs" run.name=vidur-composed
