#!/usr/bin/env bash
# FSDP2 step time and memory -> fsdp training family -> simulation.
# On a CPU: gloo, one process per rank, the simrl/tiny-llama model built in code. --clock process
# counts each rank's CPU seconds (median over ranks), so a machine with fewer cores than ranks, or
# other work on it, still measures what a rank with a core to itself takes; the worlds run
# interleaved (the CPU default: every world's ranks take turns step by step), so a passing load
# hits every world alike. The observations say they come from a CPU: the fit needs no --gpu (the
# catalog's CPU entry scales the features) and the simulation trains on deployment.training.gpu=cpu.
# On GPUs: DEVICE=cuda, NCCL, worlds one after another; the observations name the GPU.
source "$(dirname "$0")/_common.sh"
DEVICE="${DEVICE:-cpu}"
setup_venv "torch==2.13.0"
if [[ "$DEVICE" == cpu ]]; then
  SIM=(deployment.model=simrl/tiny-llama deployment.training.gpu=cpu deployment.training.gpus=4
       deployment.training.zero_stage=3 deployment.training.activation_checkpointing=false)
else
  SIM=(deployment.model="${MODEL:-Qwen/Qwen3-8B}" deployment.training.gpu="${GPU:-H100}" deployment.training.gpus=8
       deployment.training.zero_stage=3 deployment.training.activation_checkpointing=false)
fi
step "1. profile FSDP2 steps (a 4 x 4 grid of world sizes and sequence lengths)"
if [[ "$DEVICE" == cpu ]]; then
  "$BIN/srl-profile" fsdp --world-sizes 1,2,3,4 --seq-lens 32,64,128,256 --steps 4 --warmup 1 \
    --clock process --start-method fork -o "$OUT/fsdp.jsonl"
else
  "$BIN/srl-profile" fsdp --device cuda --model "${MODEL:-Qwen/Qwen3-8B}" --world-sizes 1,2,4,8 \
    --seq-lens 1024,2048,4096 --dtype bf16 -o "$OUT/fsdp.jsonl"
fi
step "2. fit the fsdp family (time and memory), 4-fold cross-validated"
"$BIN/srl-regress" fit --family fsdp --obs "$OUT/fsdp.jsonl" -o "$OUT/fsdp.json" --kfold 4
if [[ "$DEVICE" == cpu ]]; then
  step "3. the held-out check: fit without world size 3 and seq_len 128, predict them"
  "$BIN/python" "$ROOT/benchmarks/fsdp_profile.py" --obs "$OUT/fsdp.jsonl"
fi
step "4. simulate with the fitted training model (out-of-domain queries are counted and reported)"
"$BIN/srl" "${SIM[@]}" cost.training="$OUT/fsdp.json" run.training_steps=2 workload.groups=8 \
  run.output_dir="$OUT/runs" run.name=fsdp-fitted
