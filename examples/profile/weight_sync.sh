#!/usr/bin/env bash
# Weight publication by broadcast (gloo on CPU, NCCL with DEVICE=cuda) -> weight_sync family -> simulation.
source "$(dirname "$0")/_common.sh"
DEVICE="${DEVICE:-cpu}"
METHOD="${METHOD:-broadcast}"  # or filesystem (checkpoint file written, fsync'd, loaded by every instance)
setup_venv "torch==2.13.0"
step "1. time publishing 4-64 MiB to 1-3 instances ($METHOD, $DEVICE)"
"$BIN/srl-profile" weight-sync --device "$DEVICE" --method "$METHOD" --sizes-mb 4,16,64 --instances 1,2,3 \
  --repeats 3 $([[ "$DEVICE" == cpu ]] && echo --start-method fork) -o "$OUT/weight_sync.jsonl"
step "2. fit latency x buckets + bytes / bandwidth + fan-out"
"$BIN/srl-regress" fit --family weight_sync --obs "$OUT/weight_sync.jsonl" -o "$OUT/weight_sync.json"
step "3. simulate with it"
"$BIN/srl" cost.weight_sync="$OUT/weight_sync.json" run.training_steps=2 workload.groups=16 \
  run.output_dir="$OUT/runs" run.name=weight-sync-fitted
