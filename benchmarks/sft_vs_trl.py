"""`prl sft` against TRL's SFTTrainer: the same model folder, the same data, one GPU.

Model: ``prl model init --preset qwen3-0.6b`` (the Qwen3-0.6B architecture, random weights,
prl's byte-level ChatML tokenizer), trained in bf16 with AdamW. Data: a JSONL of chat
conversations (one user turn, one assistant turn) of 256 to 4,096 tokens, made here with a
fixed seed. Each run trains about ``--tokens-per-step`` tokens a step for ``--steps`` steps.

prl: ``prl sft`` as a user starts it, with the default settings except the model, data and
step size (documents packed into rows of ``--seq-len`` tokens). Also run with
``model.optim_cpu_offload`` on, to show what the optimizer offload costs (and saves).

TRL: ``SFTTrainer`` in every setting worth trying for speed, one process each, so every
run's peak memory is its own (each may fail; the table says which ran):
  - padded:   batches padded to their longest conversation, SDPA, Liger kernels,
              gradient checkpointing (TRL's memory-lean recipe)
  - packed:   packing into rows of ``--seq-len`` (TRL's BFD packing, padding-free), SDPA
              (transformers finds the packed documents from the position ids), Liger
  - packed+gc: packed with gradient checkpointing
  - packed+compile: packed with ``torch_compile``
  - flex:     packed with flex attention

Tokens/s counts the tokens trained (no padding) over steps 2..N, divided by the time of
those steps (prl: its ``time/step``; TRL: from step begin to step end with the GPU
synchronised at both). Peak memory is ``torch.cuda.max_memory_allocated``.

    python benchmarks/sft_vs_trl.py --out /tmp/sft-bench
    python benchmarks/sft_vs_trl.py --out /tmp/sft-bench --only prl --only trl-packed
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

TRL_RUNS = {
    "trl-padded": {"packing": False, "gradient_checkpointing": True},
    "trl-packed": {"packing": True, "gradient_checkpointing": False},
    "trl-packed+gc": {"packing": True, "gradient_checkpointing": True},
    "trl-packed+compile": {"packing": True, "gradient_checkpointing": False, "torch_compile": True},
    "trl-flex": {"packing": True, "gradient_checkpointing": False, "attn": "flex_attention"},
}
PRL_RUNS = {"prl": [], "prl-offload": ["--model.optim-cpu-offload", "true"]}
PRL = [sys.executable, "-c", "from prl.cli.main import main; main()"]  # the `prl` command, this Python
WORDS = "the of and to in is was for on that with as by at from it an be this are or have had not".split()


def make_data(path: Path, n: int, seed: int = 0) -> None:
    """``n`` conversations of 256-4,096 characters (the byte-level tokenizer's tokens)."""
    rng = random.Random(seed)

    def text(chars: int) -> str:
        out: list[str] = []
        while sum(len(w) + 1 for w in out) < chars:
            out.append(rng.choice(WORDS) if rng.random() < 0.7 else f"{rng.randrange(10**6)}")
        return " ".join(out)

    rows = []
    for _ in range(n):
        total = rng.randint(256, 4096)
        prompt = rng.randint(64, total // 2)
        messages = [{"role": "user", "content": text(prompt)}, {"role": "assistant", "content": text(total - prompt)}]
        rows.append(json.dumps({"messages": messages}))
    path.write_text("\n".join(rows) + "\n")


def run_prl(name: str, extra: list[str], args, model: Path, data: Path) -> dict:
    out = args.out / name
    cmd = [
        *PRL, "sft",
        "--model.name", str(model), "--data.name", str(data), "--renderer.name", "auto",
        "--data.seq-len", str(args.seq_len), "--data.batch-size", str(args.tokens_per_step // args.seq_len),
        "--data.micro-batch-size", "1", "--max-steps", str(args.steps), "--optim.lr", "1e-5",
        "--output-dir", str(out), "--run.name", name, "--clean", *extra,
    ]  # fmt: skip
    print(f"[{name}] {' '.join(cmd[len(PRL) :])}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    rows = []
    for path in glob.glob(str(out / "**" / "metrics.jsonl"), recursive=True):
        rows += [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    steps = sorted((r for r in rows if "perf/throughput" in r), key=lambda r: r["step"])[1:]
    tokens = sum(r["perf/throughput"] * r["time/step"] for r in steps)
    seconds = sum(r["time/step"] for r in steps)
    return {
        "tokens_per_s": tokens / seconds,
        "peak_gib": max(r["perf/peak_memory"] for r in steps),
        "mfu": sum(r.get("perf/mfu", 0.0) for r in steps) / len(steps),
        "steps_timed": len(steps),
    }


def trl_child(name: str, args, model: Path, data: Path) -> dict:
    """One TRL run in this process (``--child``)."""
    import torch
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    setting = TRL_RUNS[name]
    times: list[float] = []
    seen: list[int] = []

    gpu = torch.cuda.is_available()  # without one (a smoke test of this script), fp32, no Liger
    sync = torch.cuda.synchronize if gpu else (lambda: None)

    class Clock(TrainerCallback):
        def on_step_begin(self, targs, state, control, **kw):
            sync()
            self.start = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            sync()
            times.append(time.perf_counter() - self.start)
            seen.append(int(state.num_input_tokens_seen))

    tok = AutoTokenizer.from_pretrained(model)
    attn = setting.get("attn", "sdpa")
    dtype = torch.bfloat16 if gpu else torch.float32
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=dtype, attn_implementation=attn)
    packed = setting["packing"]
    cfg = SFTConfig(
        output_dir=str(args.out / name),
        max_steps=args.steps,
        learning_rate=1e-5,
        bf16=gpu,
        use_cpu=not gpu,
        per_device_train_batch_size=1 if packed else args.tokens_per_step // 2048,
        gradient_accumulation_steps=args.tokens_per_step // args.seq_len if packed else 1,
        max_length=args.seq_len,
        packing=packed,
        padding_free=packed,
        gradient_checkpointing=setting["gradient_checkpointing"],
        use_liger_kernel=gpu,
        torch_compile=setting.get("torch_compile", False),
        include_num_input_tokens_seen="non_padding",
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        dataloader_num_workers=2,
    )
    dataset = load_dataset("json", data_files=str(data), split="train")
    trainer = SFTTrainer(model=hf, args=cfg, train_dataset=dataset, processing_class=tok, callbacks=[Clock()])
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    tokens = seen[-1] - seen[0]
    return {
        "tokens_per_s": tokens / sum(times[1:]),
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else 0.0,
        "steps_timed": len(times) - 1,
    }


def run_trl(name: str, args, model: Path, data: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--out", str(args.out), "--steps", str(args.steps)]
    cmd += ["--preset", args.preset]
    cmd += ["--seq-len", str(args.seq_len), "--tokens-per-step", str(args.tokens_per_step)]
    print(f"[{name}] {TRL_RUNS[name]}", flush=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": [f"no result in {args.timeout} s"]}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-3:]}


def report(results: dict[str, dict]) -> None:
    ran = {k: v for k, v in results.items() if "error" not in v}
    trl = [v["tokens_per_s"] for k, v in ran.items() if k.startswith("trl")]
    best = max(trl) if trl else None
    print(f"\n{'run':<20} {'tokens/s':>10} {'peak GiB':>9} {'vs best TRL':>12}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<20} did not run: {' | '.join(r['error'])[:200]}")
            continue
        ratio = f"{r['tokens_per_s'] / best:.2f}x" if best else "-"
        print(f"{name:<20} {r['tokens_per_s']:>10,.0f} {r['peak_gib']:>9.2f} {ratio:>12}")
    print("JSON " + json.dumps(results))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--tokens-per-step", type=int, default=32768)
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--timeout", type=int, default=240, help="seconds each run may take")
    parser.add_argument("--only", action="append", help="run only these (prl, prl-offload, trl-...)")
    parser.add_argument("--preset", default="qwen3-0.6b", help="prl model init preset of the model")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    model, data = args.out / args.preset, args.out / "data.jsonl"
    if args.child:
        print("RESULT " + json.dumps(trl_child(args.child, args, model, data)), flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    if not (model / "config.json").exists():
        subprocess.run([*PRL, "model", "init", "--preset", args.preset, "--out", str(model)], check=True)
    make_data(data, args.samples)
    results: dict[str, dict] = {}
    for name in [*PRL_RUNS, *TRL_RUNS]:
        if args.only and name not in args.only:
            continue
        results[name] = (
            run_prl(name, PRL_RUNS[name], args, model, data) if name in PRL_RUNS else run_trl(name, args, model, data)
        )
        print(f"[{name}] {results[name]}", flush=True)
    report(results)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
