"""Optimizer offload on one GPU: the largest Qwen3 shape each mode trains, tokens/s, peak memory.

Modes (``prl_trainer_torch.offload``; the ``[model]`` settings of the torch trainer):

    none               AdamW on the device (model.optim_cpu_offload = false)
    optim_cpu_offload  AdamW moments in host memory, weights and gradients on the GPU (default)
    full_offload       gradients, fp32 masters and AdamW state in host memory, the step inside
                       the backward (model.full_offload = true)

Shapes: Qwen3 0.6B, 1.7B, 4B and 8B built from their configs with random bf16 weights
(nothing downloaded). Each step is one packed row of ``--tokens`` tokens (documents of
2048 tokens, position ids restarting per document), activation checkpointing on, the
trainer's chunked log-prob head and an RL-style loss. The first step warms up; the next
``--steps`` are timed. A CUDA out-of-memory is recorded as "does not fit"; a mode whose host
state would not fit in available RAM is skipped as "does not fit (host memory)".

    python benchmarks/offload.py --out DIR              # H200: ~6 minutes
    python benchmarks/offload.py --out DIR --tiny       # CPU smoke test of the script

Prints one line per (shape, mode) and writes DIR/offload.json and DIR/offload.md. Needs
torch and transformers only (prl_trainer_torch's offload and logprobs modules import torch
alone).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "trainer-torch" / "src"))

from prl_trainer_torch.logprobs import chunked_logprobs  # noqa: E402
from prl_trainer_torch.offload import CPUStateAdamW, FullOffload  # noqa: E402

# (hidden, intermediate, layers, heads, kv heads, tied embeddings) of the Qwen3 releases
SHAPES = {
    "0.6B": (1024, 3072, 28, 16, 8, True),
    "1.7B": (2048, 6144, 28, 16, 8, True),
    "4B": (2560, 9728, 36, 32, 8, True),
    "8B": (4096, 12288, 36, 32, 8, False),
}
MODES = ("none", "optim_cpu_offload", "full_offload")
HOST_BYTES = {"none": 0, "optim_cpu_offload": 8, "full_offload": 16}  # per parameter, fp32


def qwen3_config(name: str, tiny: bool):
    from transformers import Qwen3Config

    hidden, inter, layers, heads, kv, tied = SHAPES[name]
    if tiny:  # same family, two small layers: exercises every code path on a CPU
        hidden, inter, layers, heads, kv = 64, 128, 2, 4, 2
    return Qwen3Config(
        vocab_size=151936 if not tiny else 512,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=128 if not tiny else 16,
        max_position_embeddings=40960,
        tie_word_embeddings=tied,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        rms_norm_eps=1e-6,
    )


def host_available() -> int:
    """MemAvailable in bytes (Linux), or a large number elsewhere."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 50


def build(name: str, device: torch.device, tiny: bool):
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with device:
        model = AutoModelForCausalLM.from_config(qwen3_config(name, tiny), dtype=dtype, attn_implementation="sdpa")
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def make_optimizer(mode: str, model):
    params = [p for p in model.parameters() if p.requires_grad]
    if mode == "none":
        return torch.optim.AdamW(params, lr=1e-6, weight_decay=0.0)
    if mode == "optim_cpu_offload":
        return CPUStateAdamW(params, lr=1e-6)
    return FullOffload(params, lr=1e-6)


def batch(tokens: int, vocab: int, device: torch.device, doc: int = 2048):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, tokens), generator=g)
    pos = (torch.arange(tokens) % min(doc, tokens))[None]
    return ids.to(device), pos.to(device), torch.roll(ids, -1, 1).to(device)


def train_step(model, opt, ids, pos, targets) -> None:
    hidden = model.get_decoder()(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state
    weight = model.get_output_embeddings().weight
    logp, _ = chunked_logprobs(hidden, weight, targets, 1.0, 2048, entropy=True)
    adv = torch.where(pos % 2 == 0, 1.0, -1.0)
    loss = -(torch.exp(logp - logp.detach()) * adv).mean()
    if isinstance(opt, FullOffload):
        opt.arm()  # one micro-batch per step: it is the last one
    loss.backward()
    if not isinstance(opt, FullOffload):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_one(name: str, mode: str, args, device: torch.device) -> dict:
    """Train ``1 + args.steps`` steps of shape ``name`` in ``mode``; the result row."""
    row = {"shape": name, "mode": mode}
    model = opt = None
    try:
        model = build(name, device, args.tiny)
        n = sum(p.numel() for p in model.parameters())
        row["params_b"] = round(n / 1e9, 3)
        if n * HOST_BYTES[mode] > 0.9 * host_available():
            row["result"] = "does not fit (host memory)"
            return row
        opt = make_optimizer(mode, model)
        ids, pos, targets = batch(args.tokens, model.config.vocab_size, device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        train_step(model, opt, ids, pos, targets)
        sync(device)
        start = time.perf_counter()
        for _ in range(args.steps):
            train_step(model, opt, ids, pos, targets)
        sync(device)
        elapsed = time.perf_counter() - start
        row["result"] = "ok"
        row["tokens_per_s"] = round(args.tokens * args.steps / elapsed, 1)
        row["step_s"] = round(elapsed / args.steps, 3)
        if device.type == "cuda":
            row["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    except torch.OutOfMemoryError:
        row["result"] = "does not fit"
    finally:
        del model, opt
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def line(row: dict) -> str:
    if row["result"] != "ok":
        return f"{row['shape']:>5} {row['mode']:<18} {row['result']}"
    mem = f"{row['peak_gpu_gib']:.1f} GiB" if "peak_gpu_gib" in row else "n/a (CPU)"
    return f"{row['shape']:>5} {row['mode']:<18} {row['tokens_per_s']:>9.0f} tok/s  peak GPU {mem}"


def write(out: Path, rows: list[dict], args, device: torch.device) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "tokens": args.tokens}
    (out / "offload.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    md = ["| shape | mode | result | tokens/s | peak GPU GiB |", "|---|---|---|---|---|"]
    for r in rows:
        cells = (r["shape"], r["mode"], r["result"], r.get("tokens_per_s", ""), r.get("peak_gpu_gib", ""))
        md.append("| " + " | ".join(str(c) for c in cells) + " |")
    (out / "offload.md").write_text(f"{meta['device']}, {args.tokens}-token packed steps\n\n" + "\n".join(md) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for offload.json / offload.md")
    parser.add_argument("--tokens", type=int, default=8192, help="tokens per packed step")
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up step")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of " + ",".join(SHAPES))
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    parser.add_argument("--budget-s", type=float, default=450.0, help="skip what is left after this many seconds")
    parser.add_argument("--tiny", action="store_true", help="two-layer stand-ins (CPU smoke test)")
    args = parser.parse_args(argv)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"--shapes: unknown {', '.join(unknown)} (choose from {', '.join(SHAPES)})", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in MODES for m in modes):
        print(f"--modes: choose from {', '.join(MODES)}", file=sys.stderr)
        return 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    start, rows = time.perf_counter(), []
    for name in shapes:
        for mode in modes:
            if time.perf_counter() - start > args.budget_s:
                row = {"shape": name, "mode": mode, "result": "skipped (time budget)"}
            else:
                row = run_one(name, mode, args, device)
            rows.append(row)
            print(line(row), flush=True)
            write(args.out, rows, args, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
