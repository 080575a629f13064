#!/usr/bin/env bash
# prl rl on one GPU for real: a locally made Qwen3-0.6B-shaped model (random weights, bf16
# on the GPU), reverse-text, trainer and the embedded torch inference engine sharing the
# GPU, filesystem weights. Prints the run's step-time split (benchmarks/rl_run_summary.py).
#   bash benchmarks/gpu_rl.sh OUTPUT_DIR [STEPS] [BATCH] [MAX_TOKENS]
set -euo pipefail
out=${1:?output dir}; steps=${2:-30}; batch=${3:-256}; max_tokens=${4:-128}
prl model init --preset qwen3-0.6b --out "$out/qwen3-0.6b" --force
trap 'python benchmarks/rl_run_summary.py "$out/gpu-rl"' EXIT
prl rl @ examples/reverse-text/rl.toml --model.name "$out/qwen3-0.6b" --max-steps "$steps" \
  --output-dir "$out" --run.name gpu-rl --env-vars '{"OMP_NUM_THREADS": "4"}' --no-ckpt --clean \
  --orchestrator.batch-size "$batch" --orchestrator.train.group-size 16 \
  --orchestrator.train.sampling.max-completion-tokens "$max_tokens" --seq-len 1024 \
  --inference.backend.device cuda --inference.backend.dtype bfloat16 \
  --inference.backend.max-batch-size 256 --trainer.optim.lr 1e-5 --no-dashboard

