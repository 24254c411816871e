#!/usr/bin/env bash
# The push-3 diffusion planner on one GPU, in under 10 minutes: collect, train, evaluate; prints windows/s and
# the success at N = 3 (trained) and N = 6 (zero-shot), over every object. Run from the repository root after
# the README's install, on a machine with a CUDA GPU:
#     bash results/bench_scaling/gpu.sh
# The same on a CPU, at a toy size (a check that the script runs):
#     DEVICE=cpu PRECISION=fp32 EPISODES=20 STEPS=20 EVAL_EPISODES=2 bash results/bench_scaling/gpu.sh
set -euo pipefail
export MUJOCO_GL=${MUJOCO_GL:-egl}
DEVICE=${DEVICE:-cuda}
PRECISION=${PRECISION:-bf16}
EPISODES=${EPISODES:-2000}        # expert demonstrations of push-3 (about a minute with 8 workers)
STEPS=${STEPS:-20000}             # gradient steps at batch BATCH
BATCH=${BATCH:-1024}
EVAL_EPISODES=${EVAL_EPISODES:-20}
WORKERS=${WORKERS:-$(nproc)}
OUT=${OUT:-runs/gpu_check}

start=$(date +%s)
[ -f "$OUT/push3/meta.json" ] || ecrl-collect --out "$OUT/push3" --n-objects 3 --episodes "$EPISODES" --workers "$WORKERS"
timeout 540 ecrl-train-diffusion --dataset "$OUT/push3" --runs-dir "$OUT/runs" --name "planner_$(date +%H%M%S)" \
    --device "$DEVICE" --precision "$PRECISION" --batch-size "$BATCH" --steps "$STEPS" \
    --eval-every 0 --final-eval-objects 3 6 --final-eval-episodes "$EVAL_EPISODES" --no-progress
echo "gpu.sh: $(( $(date +%s) - start )) s in all"
