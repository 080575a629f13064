#!/usr/bin/env bash
# The GPU reverse-text example (examples/reverse-text/gpu/) as a user with the Hugging Face
# Hub runs it, on a machine that cannot reach the hub: a local hub (benchmarks/hub_serve.py)
# serves a Qwen3-0.6B-shaped model with random weights (`prl model init --preset
# qwen3-0.6b`) as Qwen/Qwen3-0.6B, and a reverse-text SFT set as
# PrimeIntellect/Reverse-Text-SFT. Prints the dry run's listing, how long `prl fetch`
# took, the SFT and RL runs' figures, and which files the hub sent (each once).
#   bash benchmarks/hub_gpu.sh OUTPUT_DIR [SFT_STEPS] [RL_STEPS]
set -euo pipefail
out=${1:?output dir}; sft_steps=${2:-20}; rl_steps=${3:-5}
# PRESET=tiny RL_FLAGS="--inference.backend.device cpu --inference.backend.dtype float32": a CPU smoke run
preset=${PRESET:-qwen3-0.6b}; read -r -a rl_flags <<< "${RL_FLAGS:-}"
mkdir -p "$out"
export HF_HOME="$out/hf" HF_HUB_DISABLE_XET=1
prl model init --preset "$preset" --out "$out/repo-model" --force >/dev/null
python benchmarks/hub_serve.py --url-file "$out/hub.url" --log "$out/hub-log.json" \
  --model "Qwen/Qwen3-0.6B=$out/repo-model" --dataset "PrimeIntellect/Reverse-Text-SFT=reverse-text:4000" &
hub_pid=$!
trap 'kill $hub_pid 2>/dev/null || true' EXIT
for _ in $(seq 120); do [[ -s "$out/hub.url" ]] && break; sleep 0.5; done
export HF_ENDPOINT=$(cat "$out/hub.url")
echo "== dry run (empty cache)"
prl sft @ examples/reverse-text/gpu/sft.toml --output-dir "$out" --dry-run | grep -E "would fetch|Dry run"
echo "== prl fetch"
t0=$(date +%s.%N)
prl fetch @ examples/reverse-text/gpu/sft.toml
echo "fetch took $(python -c "print(round($(date +%s.%N) - $t0, 1))") s; cache: $(du -sh "$HF_HOME/hub" | cut -f1)"
echo "== prl sft ($sft_steps steps)"
t0=$(date +%s.%N)
prl sft @ examples/reverse-text/gpu/sft.toml --output-dir "$out" --max-steps "$sft_steps" --clean 2>&1 | tail -n 14
echo "sft took $(python -c "print(round($(date +%s.%N) - $t0, 1))") s"
echo "== prl rl ($rl_steps steps)"
t0=$(date +%s.%N)
prl rl @ examples/reverse-text/gpu/rl.toml --output-dir "$out" --max-steps "$rl_steps" --clean \
  --orchestrator.batch-size 32 --orchestrator.train.group-size 8 \
  --orchestrator.train.sampling.max-completion-tokens 32 --seq-len 1024 \
  --env-vars '{"OMP_NUM_THREADS": "4"}' --no-dashboard "${rl_flags[@]}" 2>&1 | tail -n 14
echo "rl took $(python -c "print(round($(date +%s.%N) - $t0, 1))") s"
python benchmarks/rl_run_summary.py "$out/reverse-text-gpu-rl" || true
kill $hub_pid; wait $hub_pid || true
echo "== files the hub sent: $(cat "$out/hub-log.json")"
