#!/usr/bin/env bash
# Compiled `prl sft` on mixed-length packed rows: per-step times and every recompile.
# Issue #16: one recompile at step 5 (about 6 s) on an H200. The data is the SFT loader's
# fake documents (seq_len/8 to seq_len tokens, so 2k-16k at the default 16384), two rows
# per step, each row trimmed to its real length: row length, document count and longest
# document change from row to row. After step 1 no step should recompile.
#   bash benchmarks/sft_recompile.sh OUTPUT_DIR [STEPS] [SEQ_LEN] [PRESET]
# CPU smoke test of the script (compiles on CPU, a few minutes):
#   PRL_TRAINER_COMPILE=1 bash benchmarks/sft_recompile.sh /tmp/recompile 4 512 tiny
set -euo pipefail
out=${1:?output dir}; steps=${2:-10}; seq_len=${3:-16384}; preset=${4:-qwen3-0.6b}
mkdir -p "$out"
[ -d "$out/$preset" ] || prl model init --preset "$preset" --out "$out/$preset"
log="$out/sft-recompile.log"
# recompiles: one line per guard failure; the step lines come from the metrics below
TORCH_LOGS=recompiles prl sft --model.name "$out/$preset" --data.type fake --data.seq-len "$seq_len" \
  --data.batch-size 2 --data.micro-batch-size 1 --max-steps "$steps" --output-dir "$out" \
  --run.name sft-recompile --clean --no-dashboard 2>&1 | tee "$log"
python - "$out/sft-recompile" "$log" <<'PY'
import json, pathlib, re, sys
run, log = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = [json.loads(line) for line in (run / "monitors/file/metrics.jsonl").read_text().splitlines() if line.strip()]
steps = [r for r in rows if "time/step" in r]
for r in steps:
    print(f"step {r['step']:>3}  {r['time/step']:7.2f} s  {r['perf/throughput']:9.0f} tokens/s")
later = steps[1:]
if later:
    total = sum(r["time/step"] for r in later)
    toks = sum(r["perf/throughput"] * r["time/step"] for r in later)
    print(f"steps 2-{steps[-1]['step']}: {total:.2f} s, {toks / total:.0f} tokens/s")
# a recompile belongs to the step whose "step N/M" log line follows it
pending, per_step = [], {}
lines = log.read_text().splitlines()
for i, line in enumerate(lines):
    if "Recompiling function" in line:
        fn = re.search(r"Recompiling function (\S+)", line).group(1)
        reasons = (re.search(r"\]\s+- (.*)", x) for x in lines[i + 1 : i + 4])
        why = next((m.group(1) for m in reasons if m), "")
        pending.append(f"{fn}: {why[:150]}")
    step = re.search(r"prl\.trainer: step (\d+)/", line)
    if step and pending:
        per_step.setdefault(int(step.group(1)), []).extend(pending)
        pending = []
total = sum(len(v) for v in per_step.values()) + len(pending)
print(f"recompiles: {total}, after step 1: {sum(len(v) for k, v in per_step.items() if k > 1)}")
for step, items in sorted(per_step.items()):
    for item in items:
        print(f"  step {step}: {item}")
PY
