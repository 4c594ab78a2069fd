#!/usr/bin/env bash
# The PSRL scenario SimRL's default run follows (qwen3_8b_megatron_simulate): Qwen3-8B,
# 160 prompt groups x 8 samples, 5 training steps, 2 rollout instances, PSRL's per-version
# staleness buffers and per-instance weight pulls, router residency cap off.
#
# Knobs, as environment variables (e.g. `STALENESS=2 bash psrl_aligned.sh`); any further
# KEY=VALUE arguments are passed to srl as overrides:
#   STALENESS      psrl.staleness (eta): versions a trajectory may lag; 0 = on-policy buffers
#   ENTRIES        staleness_buffer_entries: groups per training step (160 / 5 steps = 32)
#   INSTANCES      rollout instances (one H100 each, TP1)
#   ACTIVE_CAP     router per-instance residency cap; 0 disables it (the real run's cap never
#                  binds at this workload size)
#   ROLLOUT_COST   rollout cost model: `roofline` (analytical) or a fitted artifact, e.g.
#                  simrl/cost/data/rollout-composed-h100.json (fitted on real H100 kernel timings)
#   TRAINING_COST  training cost model: `analytical` or an artifact from `srl-regress fit`
# Point ROLLOUT_COST / TRAINING_COST at artifacts you produced with srl-profile + srl-regress
# to simulate your own cluster.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
srl="${SRL:-$here/.venv/bin/srl}"
STALENESS="${STALENESS:-0}"
ENTRIES="${ENTRIES:-32}"
INSTANCES="${INSTANCES:-2}"
ACTIVE_CAP="${ACTIVE_CAP:-0}"
ROLLOUT_COST="${ROLLOUT_COST:-roofline}"
TRAINING_COST="${TRAINING_COST:-analytical}"

exec "$srl" \
  deployment.model=qwen3-8b \
  deployment.rollout.instances="$INSTANCES" \
  workload.generator=rl_math workload.groups=160 \
  policy=psrl policy.staleness="$STALENESS" policy.staleness_buffer_entries="$ENTRIES" \
  router.active_cap="$ACTIVE_CAP" \
  cost.rollout="$ROLLOUT_COST" cost.training="$TRAINING_COST" \
  run.training_steps=5 run.name=psrl_aligned \
  "$@"
