#!/usr/bin/env bash
# Megatron-Bridge training steps per layout -> hydraulis training family -> simulation. NEEDS GPUs
# (NPROC on this node). Not run in this repository's development environment (no GPU there).
source "$(dirname "$0")/_common.sh"
MODEL="${MODEL:-Qwen/Qwen3-8B}"
NPROC="${NPROC:-8}"
setup_venv
step "1. the pinned GPU stack (torch CUDA wheel, Megatron-Bridge v0.6.0 + Megatron-LM, flash-attn)"
bash "$ROOT/third_party/install.sh" --only torch,megatron,flash-attn,editable
step "2. time training steps per layout and sequence length (mock data, the recipe's optimizer)"
"$BIN/srl-profile" megatron --model "$MODEL" --nproc "$NPROC" --layouts tp1pp1,tp2pp1,tp4pp1,tp2pp2 \
  --seq-lengths 2048,4096,8192 -o "$OUT/megatron.jsonl"
step "3. fit the hydraulis family (per layout: a*s^2 + b*s + c, 1F1B bubble; memory)"
"$BIN/srl-regress" fit --family hydraulis --obs "$OUT/megatron.jsonl" -o "$OUT/hydraulis.json" --kfold 5
step "4. simulate with it"
"$BIN/srl" deployment.model="$MODEL" cost.training="$OUT/hydraulis.json" run.training_steps=2 \
  run.output_dir="$OUT/runs" run.name=megatron-hydraulis
