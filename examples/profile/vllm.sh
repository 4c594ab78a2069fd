#!/usr/bin/env bash
# A real vLLM engine under forced-length batches -> psrl rollout family -> simulation. NEEDS A GPU.
# Not run in this repository's development environment (no GPU there).
source "$(dirname "$0")/_common.sh"
MODEL="${MODEL:-Qwen/Qwen3-8B}"
TP="${TP:-1}"
setup_venv
step "1. the pinned GPU stack (torch CUDA wheel, vLLM v0.33.0, ...); --dry-run shows the plan"
bash "$ROOT/third_party/install.sh" --only torch,vllm,editable
step "2. drive vLLM: every iteration's batch, prefill/decode tokens, KV in use and step time; the KV capacity"
"$BIN/srl-profile" vllm --model "$MODEL" --tp "$TP" -o "$OUT/vllm.jsonl"
step "3. fit the psrl family (a + b*batch + c*kv + d*prefill) for this model and TP"
"$BIN/srl-regress" fit --family psrl --obs "$OUT/vllm.jsonl" --model "$MODEL" --tp "$TP" -o "$OUT/psrl.json" --kfold 5
step "4. simulate with it"
"$BIN/srl" deployment.model="$MODEL" cost.rollout="$OUT/psrl.json" run.training_steps=2 \
  run.output_dir="$OUT/runs" run.name=vllm-psrl
