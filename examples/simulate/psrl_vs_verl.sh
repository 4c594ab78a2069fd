#!/usr/bin/env bash
# The headline question: "With staleness bounded at 2 and the same batch size, does PSRL stay
# latency-bound while verl's overage queue slowly fills up?"
#
# Four runs of Qwen3-8B on H100s (catalog specs; roofline rollout and analytical training costs)
# on the long-tailed rl_math workload (completions: median 600, p99 4k, cap 8k tokens), the same
# batch of 32 groups x 8 samples per step for both presets, `srl --staleness 2`
# (psrl: policy.staleness=2; verl: fully_async, staleness_threshold=2.0, which is a sample budget:
# the staleness it reaches is reported), in two 16-GPU deployments:
#   rollout_bound:  4 rollout instances (TP1) + 12 training GPUs (TP1, DP12)
#   trainer_bound: 12 rollout instances (TP1) +  4 training GPUs (TP2, DP2)
# then examples/simulate/psrl_vs_verl.py writes OUT/psrl_vs_verl.md (the answer, generated
# from the runs' report.json and telemetry.jsonl), OUT/psrl_vs_verl.{png,html} (the plot), and
# prints the answer. Deterministic: a rerun gives byte-identical files.
#
#   bash examples/simulate/psrl_vs_verl.sh [OUT] [--quick]     (default OUT: outputs/psrl_vs_verl)
#
# Knobs, as environment variables: STEPS (training steps, default 10; --quick: 5, no PNG),
# ROLLOUT_COST / TRAINING_COST (cost models, as in psrl_aligned.sh), SRL and PYTHON (the tools).
# The checked-in examples/simulate/psrl_vs_verl.{md,png} are a default run's output.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
srl="${SRL:-$here/.venv/bin/srl}"
python="${PYTHON:-$here/.venv/bin/python}"
out="outputs/psrl_vs_verl"
quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -*) echo "psrl_vs_verl.sh: unknown option $arg (usage: psrl_vs_verl.sh [OUT] [--quick])" >&2; exit 2 ;;
    *) out="$arg" ;;
  esac
done
if [ "$quick" = 1 ]; then STEPS="${STEPS:-5}"; png="--no-png"; else STEPS="${STEPS:-10}"; png=""; fi
BATCH=32
ROLLOUT_COST="${ROLLOUT_COST:-roofline}"
TRAINING_COST="${TRAINING_COST:-analytical}"

declare -A split=(
  [rollout_bound]="deployment.rollout.instances=4 deployment.training.gpus=12 deployment.training.tp=1"
  [trainer_bound]="deployment.rollout.instances=12 deployment.training.gpus=4 deployment.training.tp=2"
)
for dep in rollout_bound trainer_bound; do
  for preset in psrl verl; do
    batch_knob="policy.staleness_buffer_entries=$BATCH"
    [ "$preset" = verl ] && batch_knob="policy.ppo_mini_batch_size=$((BATCH / 4)) policy.trigger_parameter_sync_step=4"
    # shellcheck disable=SC2086  # the split and the batch knobs are word lists on purpose
    "$srl" run -q --staleness 2 -o "$out/$dep" \
      policy="$preset" $batch_knob \
      deployment.model=qwen3-8b ${split[$dep]} \
      workload.generator=rl_math workload.groups=$((STEPS * BATCH)) \
      cost.rollout="$ROLLOUT_COST" cost.training="$TRAINING_COST" \
      run.training_steps="$STEPS" run.name="$preset" run.plots=false
  done
done
"$python" "$here/examples/simulate/psrl_vs_verl.py" "$out" $png
