#!/usr/bin/env bash
# FSDP2 step time and memory -> fsdp training family -> simulation.
# On a CPU: gloo, one process per rank, the simrl/tiny-llama model built in code. --clock process
# counts each rank's CPU seconds, so a machine with fewer cores than ranks still measures what a
# rank with a core to itself takes. --gpu H100 only scales the family's features (the fitted
# coefficients absorb it): the artifact describes this CPU. On GPUs: DEVICE=cuda, NCCL, and
# --gpu is not needed (the observations name the GPU).
source "$(dirname "$0")/_common.sh"
DEVICE="${DEVICE:-cpu}"
setup_venv "torch==2.13.0"
step "1. profile FSDP2 steps"
if [[ "$DEVICE" == cpu ]]; then
  "$BIN/srl-profile" fsdp --world-sizes 1,2,3,4 --seq-lens 32,64,128,256,512 --steps 5 --warmup 2 \
    --clock process --start-method fork -o "$OUT/fsdp.jsonl"
  GPU_OPT=(--gpu H100)
else
  "$BIN/srl-profile" fsdp --device cuda --model "${MODEL:-Qwen/Qwen3-8B}" --world-sizes 2,4,8 \
    --seq-lens 1024,2048,4096 --dtype bf16 -o "$OUT/fsdp.jsonl"
  GPU_OPT=()
fi
step "2. fit the fsdp family (time and memory), 5-fold cross-validated"
"$BIN/srl-regress" fit --family fsdp --obs "$OUT/fsdp.jsonl" "${GPU_OPT[@]}" -o "$OUT/fsdp.json" --kfold 5
step "3. the held-out check: fit without world size 3 and seq_len 128, predict them"
"$BIN/python" "$ROOT/benchmarks/fsdp_profile.py" --obs "$OUT/fsdp.jsonl"
step "4. simulate with the fitted training model (out-of-domain queries are counted and reported)"
"$BIN/srl" deployment.model="${MODEL:-simrl/tiny-llama}" cost.training="$OUT/fsdp.json" \
  run.training_steps=2 workload.groups=8 run.output_dir="$OUT/runs" run.name=fsdp-fitted
