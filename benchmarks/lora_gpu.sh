#!/usr/bin/env bash
# LoRA on one GPU, end to end (docs/lora.md): a locally made Qwen3-0.6B-shaped model (random
# weights, nothing downloaded), then
#   1. prl sft with [model.lora] on cuda (bf16): the loss must go down, the checkpoint holds
#      only the adapter, prl export refuses it without --merge-lora (exit 2) and merges it
#      with the flag; the merged model's logits must equal the adapted model's;
#   2. prl rl with [model.lora], torch inference backend on the same GPU, filesystem weights:
#      every step's adapter must be loaded by inference (/load_lora_adapter) and sampled from.
# Prints one PASS/FAIL line per check and exits non-zero on the first failure.
#   bash benchmarks/lora_gpu.sh OUTPUT_DIR [SFT_STEPS] [RL_STEPS]
# PRESET=tiny DEVICE=cpu runs the same checks on a CPU (how the script itself is tested).
set -euo pipefail
out=${1:?output dir}; sft_steps=${2:-30}; rl_steps=${3:-3}
preset=${PRESET:-qwen3-0.6b}; device=${DEVICE:-cuda}
dtype=$([ "$device" = cuda ] && echo bfloat16 || echo float32)
model="$out/$preset"
lora=(--model.lora.rank 16 --model.lora.alpha 32)
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; exit 1; }

prl model init --preset "$preset" --out "$model" --force
prl data reverse-text --out "$out/data" --train 4000 --val 64

echo "== LoRA SFT on $device ($sft_steps steps)"
prl sft @ examples/reverse-text/sft.toml --model.name "$model" "${lora[@]}" --optim.lr 1e-3 \
  --max-steps "$sft_steps" --output-dir "$out" --run.name lora-sft --clean --no-dashboard \
  --data.name "$out/data/train.jsonl" --val.data.name "$out/data/val.jsonl" --val.interval "$sft_steps" \
  --ckpt.interval "$sft_steps" --model.dtype "$dtype"
ckpt="$out/lora-sft/checkpoints/step_$sft_steps"
python - "$out/lora-sft/monitors/file/metrics.jsonl" <<'EOF' || fail "sft loss did not go down"
import json, sys
loss = [r["loss/mean"] for r in map(json.loads, open(sys.argv[1])) if "loss/mean" in r]
print(f"sft loss first {loss[0]:.3f} last {loss[-1]:.3f}")
sys.exit(0 if loss[-1] < loss[0] - 0.5 else 1)
EOF
pass "sft loss went down"
[ -f "$ckpt/trainer/adapter_config.json" ] || fail "no adapter_config.json in $ckpt/trainer"
du -sh "$ckpt/trainer"
set +e; prl export "$ckpt" "$out/refused" 2>"$out/refused.err"; code=$?; set -e
[ "$code" = 2 ] && grep -q -- "--merge-lora" "$out/refused.err" || fail "export without --merge-lora: exit $code"
pass "export refuses a LoRA checkpoint: $(cat "$out/refused.err")"
prl export "$ckpt" "$out/merged" --merge-lora --dtype float32
python - "$model" "$ckpt" "$out/merged" "$device" <<'EOF' || fail "merged logits differ from the adapted model's"
import sys, torch
import torch.distributed.checkpoint as dcp
from transformers import AutoModelForCausalLM
from prl_trainer_torch.lora import apply_lora, is_adapter_key
from prl_trainer_torch.export import _LoraSettings, _lora_config
from pathlib import Path

base, ckpt, merged, dev = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
adapted = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
apply_lora(adapted, _LoraSettings.of(_lora_config(ckpt)))
state = {"model": {k: v for k, v in adapted.state_dict().items() if is_adapter_key(k)}}
dcp.load(state, checkpoint_id=str(ckpt / "trainer"))
adapted.load_state_dict(state["model"], strict=False)
plain = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
ids = torch.randint(0, adapted.config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    a, m = adapted.to(dev)(input_ids=ids.to(dev)).logits, plain.to(dev)(input_ids=ids.to(dev)).logits
err = (a - m).abs().max().item()
print(f"merged vs adapted: max |logit diff| {err:.2e} (logit scale {a.abs().max().item():.1f})")
sys.exit(0 if err < 1e-2 else 1)
EOF
pass "merged export computes the adapted model"

echo "== LoRA RL on $device ($rl_steps steps, torch inference backend)"
logs="$out/lora-rl/logs/attempt_1"
# Small steps: this half checks that adapters are published, served and trained on, not
# learning; the torch engine makes ~200 tokens/s inside a run on an H200 (benchmarks/gpu_rl.md).
# RL_LIMIT bounds the run, so a stuck run still prints its components' last log lines.
timeout "${RL_LIMIT:-900}" prl rl @ examples/reverse-text/rl.toml --model.name "$model" "${lora[@]}" \
  --max-steps "$rl_steps" --output-dir "$out" --run.name lora-rl --clean --no-ckpt --no-dashboard \
  --orchestrator.deterministic --env-vars '{"OMP_NUM_THREADS": "4"}' --orchestrator.batch-size 32 \
  --orchestrator.train.group-size 8 --orchestrator.train.sampling.max-completion-tokens 32 --seq-len 1024 \
  --inference.backend.device "$device" --inference.backend.dtype "$dtype" --trainer.optim.lr 1e-4 || {
  code=$?
  for f in "$logs"/*.log; do echo "== $f"; tail -n 25 "$f"; done
  fail "prl rl exited $code (124: stopped after RL_LIMIT=${RL_LIMIT:-900} s); its logs' last lines are above"
}
served=$(grep -c "serving LoRA adapter 'prl-lora'" "$logs/inference.log" || true)
[ "$served" = $((rl_steps + 1)) ] || fail "inference loaded $served adapters, expected $((rl_steps + 1))"
pass "inference loaded the adapter of versions 0..$rl_steps"
python - "$out/lora-rl/monitors/file/metrics.jsonl" "$rl_steps" <<'EOF' || fail "rl metrics"
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r.get("producer") == "trainer" and "loss/all" in r]
for r in rows:
    print(f"rl step {r['step']}: mismatch_kl {r['mismatch_kl/all/mean']:.2e} grad_norm {r['optim/grad_norm']:.3f}")
sys.exit(0 if len(rows) == int(sys.argv[2]) and all(r["optim/grad_norm"] > 0 for r in rows) else 1)
EOF
pass "rl trained $rl_steps steps on the served adapter"
