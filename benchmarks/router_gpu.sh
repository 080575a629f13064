#!/usr/bin/env bash
# prl rl with data-parallel inference on GPUs for real (not run on the CPU-only dev machine):
# a locally made Qwen3-0.6B-shaped model, reverse-text, [deployment] num_infer_gpus = 2
# (two torch engines, one per GPU, behind prl's router) and num_train_gpus = 1 (or 2: torchrun
# with two ranks), filesystem weights. Needs 3 GPUs (4 with TRAIN_GPUS=2). Checks afterwards
# that every engine took every weight version and that both served rollouts, and prints
# where each engine ran (nvidia-smi shows one process per GPU while it runs).
#   bash benchmarks/router_gpu.sh OUTPUT_DIR [STEPS] [TRAIN_GPUS]
set -euo pipefail
out=${1:?output dir}; steps=${2:-5}; train=${3:-1}
prl model init --preset qwen3-0.6b --out "$out/qwen3-0.6b" --force
prl rl @ examples/reverse-text/rl.toml --model.name "$out/qwen3-0.6b" --max-steps "$steps" \
  --output-dir "$out" --run.name router-gpu --env-vars '{"OMP_NUM_THREADS": "4"}' --no-ckpt --clean \
  --deployment.num-infer-gpus 2 --deployment.num-train-gpus "$train" \
  --orchestrator.batch-size 128 --orchestrator.train.group-size 16 \
  --orchestrator.train.sampling.max-completion-tokens 128 --seq-len 1024 \
  --inference.backend.device cuda --inference.backend.dtype bfloat16 --no-dashboard
logs="$out/router-gpu/logs/latest"
grep "router: /update_weights: engine versions \[$steps, $steps\]" "$logs/inference.log"
grep "router: requests routed per engine" "$logs/inference.log"
grep -h "CUDA_VISIBLE_DEVICES" "$logs/inference.log"
python -c "import json,sys; print('trainer ranks:', json.load(open(sys.argv[1]))['num_workers'])" \
  "$out/router-gpu/configs/latest/resolved/trainer.json"
