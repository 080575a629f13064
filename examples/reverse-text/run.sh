#!/usr/bin/env bash
# The reverse-text demo (`make demo`): a tiny model made locally, SFT, then RL, with the
# held-out reward measured before and after RL on the same eval split of the RL task.
#
#   1. prl model init --preset tiny --out models/tiny           (skipped when present)
#   2. SFT data from the RL task itself: task_sft_data.py -> data/reverse-text-task
#      (the reverse-text taskset's train/eval splits with its system prompt; skipped when
#      present). SFT on the RL task's own prompts gives RL a start it can improve on.
#   3. prl sft @ examples/reverse-text/sft.toml on that data, run reverse-text-task-sft
#      (skipped when its final checkpoint is complete, else --clean), then prl export ->
#      models/tiny-sft
#   4. held-out reward of models/tiny-sft: prl eval @ examples/reverse-text/rl-eval.toml
#      against a `prl inference` server started here
#   5. prl rl @ examples/reverse-text/rl.toml --clean (always a fresh run), then prl export
#      of its final checkpoint -> models/tiny-rl
#   6. held-out reward of models/tiny-rl, the same way; then both with standard errors and
#      the gain (examples/reverse-text/heldout.py)
#
# Needs `prl` on PATH (the Makefile puts the venv's bin first). Port: $PRL_DEMO_PORT (8011).
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=outputs
PORT="${PRL_DEMO_PORT:-8011}"
DATA=data/reverse-text-task
SFT_RUN=reverse-text-task-sft
SFT_STEPS=$(python -c 'import tomllib; print(tomllib.load(open("examples/reverse-text/sft.toml", "rb"))["max_steps"])')
SFT_CKPT="$OUT/$SFT_RUN/checkpoints/step_$SFT_STEPS"
SERVER_PID=""
DEMO_START=$(date +%s)

stop_server() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" && wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT

# held_out_reward MODEL NAME: serve MODEL and evaluate it into run NAME.
held_out_reward() {
  local model="$1" name="$2" log="$OUT/$2.inference.log"
  mkdir -p "$OUT"
  prl inference --model.name "$model" --server.port "$PORT" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "inference server for $model died; see $log" >&2; exit 1; }
    sleep 1
  done
  prl eval @ examples/reverse-text/rl-eval.toml --model.name "$model" \
    --client.base-url "http://127.0.0.1:$PORT" --run.name "$name" --clean >&2
  stop_server
}

[[ -f models/tiny/config.json ]] || prl model init --preset tiny --out models/tiny
[[ -f "$DATA/val.jsonl" ]] || python examples/reverse-text/task_sft_data.py "$DATA"

if [[ ! -f "$SFT_CKPT/trainer/COMPLETE" ]]; then
  prl sft @ examples/reverse-text/sft.toml --run.name "$SFT_RUN" --clean \
    --data.name "$DATA/train.jsonl" --val.data.name "$DATA/val.jsonl"
fi
prl export "$SFT_CKPT" models/tiny-sft --dtype float32

held_out_reward models/tiny-sft reverse-text-eval-sft
python examples/reverse-text/heldout.py "$OUT/reverse-text-eval-sft"

start=$(date +%s)
prl rl @ examples/reverse-text/rl.toml --clean
rl_seconds=$(( $(date +%s) - start ))
last=$(ls -d "$OUT"/reverse-text-rl/checkpoints/step_* | sed 's/.*step_//' | sort -n | tail -1)
prl export "$OUT/reverse-text-rl/checkpoints/step_$last" models/tiny-rl --dtype float32

held_out_reward models/tiny-rl reverse-text-eval-rl
echo
echo "prl rl took ${rl_seconds}s. Held-out reward before and after RL (mean over texts ± standard error):"
python examples/reverse-text/heldout.py "$OUT/reverse-text-eval-sft" "$OUT/reverse-text-eval-rl"
echo "The demo took $(( $(date +%s) - DEMO_START ))s in all (model init, SFT, both evaluations, RL, exports)."
echo "Curves: $OUT/reverse-text-rl/monitors/file/metrics.jsonl (reward/all/mean and entropy/all/mean by step)"
echo "        or: prl dashboard $OUT   (then open the reverse-text-rl run)"
