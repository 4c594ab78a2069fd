#!/usr/bin/env bash
# Rollout load spikes and training falls idle: how many engines can move to training without
# stalling the next batch? One command: simulate Qwen3-8B on 16 H100s (8 rollout engines of TP1,
# 8 training GPUs; PSRL; the long-tailed rl_math workload; roofline rollout and analytical
# training costs, NCCL weight sync), take the snapshot at the rollout load spike while the
# trainer waits for its second batch, predict the next batch with k = 0..7 engines moved to
# training (resharding priced by the weight-sync model) over 16 draws, and write report.md (the
# answer), move_engines.png/.html, move_engines.json and spike.json (the snapshot).
#   bash examples/predict/move_engines.sh [OUT] [--quick]    (default OUT: outputs/move_engines)
# --quick: 4 rollout engines, 64 prompts, 3 draws, no PNG (the test's version, ~20 s).
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${BIN:-$here/.venv/bin}"
out=outputs/move_engines
quick=0
for a in "$@"; do
    case "$a" in
        --quick) quick=1 ;;
        -*) echo "move_engines.sh: unknown option $a (expected [OUT] [--quick])" >&2; exit 2 ;;
        *) out="$a" ;;
    esac
done
cfg=(deployment.model=qwen3-8b deployment.rollout.gpu=H100 deployment.rollout.tp=1 deployment.training.gpu=H100
     deployment.training.gpus=8 cost.rollout=roofline cost.training=analytical cost.weight_sync=nccl
     policy=psrl workload.generator=rl_math run.training_steps=3 run.seed=0)
if [[ $quick == 1 ]]; then
    cfg+=(deployment.rollout.instances=4 workload.groups=64); opts=(--draws 3 --no-png)
else
    cfg+=(deployment.rollout.instances=8 workload.groups=256); opts=(--draws 16)
fi
sets=()
for kv in "${cfg[@]}"; do sets+=(--set "$kv"); done
"$bin/srl-predict" move-engines --spike "${sets[@]}" "${opts[@]}" --tolerance 1.0 -o "$out"
