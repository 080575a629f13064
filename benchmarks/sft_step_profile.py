"""Where an SFT step spends its time: ``prl sft``'s own step (``SFTRun.train_step``), timed
and profiled in this process, for one or more settings.

The model and data are those of ``sft_vs_trl.py`` (``prl model init --preset``, generated
chat rows of 256-4,096 tokens). Each variant's config is resolved by ``prl sft --dry-run``
with the variant's flags, exactly as a user's run resolves it; the run then goes through
``SFTRun`` here so one step can be profiled. Prints tokens/s over the timed steps, peak
memory, and for the profiled step the GPU's busy share and the top kernels.

    python benchmarks/sft_step_profile.py --out /tmp/sft-prof
    python benchmarks/sft_step_profile.py --out /tmp/sft-prof \
        --variant "no-offload=--model.optim-cpu-offload false"
    python benchmarks/sft_step_profile.py --out /tmp/sft-prof --preset tiny --steps 3   # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sft_vs_trl as bench  # noqa: E402


def resolve(name: str, flags: list[str], args, model: Path, data: Path) -> Path:
    """The resolved sft.json of ``prl sft --dry-run`` with the benchmark's settings."""
    out = args.out / name
    cmd = [
        *bench.PRL, "sft",
        "--model.name", str(model), "--data.name", str(data), "--renderer.name", "auto",
        "--data.seq-len", str(args.seq_len), "--data.batch-size", str(args.tokens_per_step // args.seq_len),
        "--data.micro-batch-size", "1", "--max-steps", str(args.steps), "--optim.lr", "1e-5",
        "--output-dir", str(out), "--run.name", name, "--clean", "--dry-run", *flags,
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return next(out.glob("**/resolved/sft.json"))


def profile_variant(name: str, flags: list[str], args, model: Path, data: Path) -> dict:
    from prl_trainer_torch.sft import SFTRun

    from prl.config.roots import SFTConfig

    config = SFTConfig.model_validate_json(resolve(name, flags, args, model, data).read_text())
    print(f"== {name}: {' '.join(flags) or '(defaults)'}", flush=True)
    run = SFTRun(config)
    gpu = run.dist.device.type == "cuda"
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    rows = []
    try:
        for step in range(1, args.steps + 1):
            profiling = args.profile and step == args.steps
            t0 = time.perf_counter()
            with _profiler(profiling, gpu) as prof:
                metrics = run.train_step()
            wall = time.perf_counter() - t0
            rows.append(metrics)
            print(
                f"{name} step {step}: {wall:.3f} s, {metrics['perf/throughput']:,.0f} tok/s, "
                f"fwd+bwd {metrics['time/forward_backward']:.3f} s, optimizer {metrics['time/optimizer']:.3f} s, "
                f"loss {metrics['loss/mean']:.4f}",
                flush=True,
            )
            if profiling:
                _print_profile(prof, wall, gpu)
    finally:
        run.close()
    timed = rows[1 : len(rows) - args.profile] or rows[-1:]  # neither the first step nor the profiled one
    tokens = sum(r["perf/throughput"] * r["time/step"] for r in timed)
    seconds = sum(r["time/step"] for r in timed)
    return {
        "tokens_per_s": tokens / seconds,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else 0.0,
        "mfu": sum(r.get("perf/mfu", 0.0) for r in timed) / len(timed),
        "fwd_bwd_s": sum(r["time/forward_backward"] for r in timed) / len(timed),
        "optimizer_s": sum(r["time/optimizer"] for r in timed) / len(timed),
        "steps_timed": len(timed),
    }


def _profiler(on: bool, gpu: bool):
    import contextlib

    if not on:
        return contextlib.nullcontext()
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else []))


def _print_profile(prof, wall: float, gpu: bool) -> None:
    events = prof.key_averages()
    if gpu:
        busy = sum(e.self_device_time_total for e in events) / 1e6
        print(f"profiled step: wall {wall:.3f} s, GPU kernel time {busy:.3f} s ({busy / wall:.0%} busy)")
        print(events.table(sort_by="self_cuda_time_total", row_limit=20, max_name_column_width=60))
    print(events.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=8, help="steps per variant (the first is not timed)")
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--tokens-per-step", type=int, default=32768)
    p.add_argument("--samples", type=int, default=3000)
    p.add_argument("--preset", default="qwen3-0.6b")
    p.add_argument("--no-profile", dest="profile", action="store_false", help="time only")
    example = '"no-offload=--model.optim-cpu-offload false"'
    p.add_argument("--variant", action="append", default=[], help=f"NAME=FLAGS, repeatable: {example}")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model, data = args.out / args.preset, args.out / "data.jsonl"
    if not (model / "config.json").exists():
        subprocess.run([*bench.PRL, "model", "init", "--preset", args.preset, "--out", str(model)], check=True)
    bench.make_data(data, args.samples)
    variants = [v.partition("=") for v in args.variant] or [("prl", "=", "")]
    results = {}
    for name, _, flags in variants:
        results[name] = profile_variant(name, shlex.split(flags), args, model, data)
        print(f"[{name}] {json.dumps(results[name])}", flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    print(f"\n{'variant':<24} {'tokens/s':>10} {'peak GiB':>9} {'MFU':>6} {'fwd+bwd s':>10} {'optim s':>8}")
    for name, r in results.items():
        print(
            f"{name:<24} {r['tokens_per_s']:>10,.0f} {r['peak_gib']:>9.2f} {r['mfu']:>6.1%} "
            f"{r['fwd_bwd_s']:>10.3f} {r['optimizer_s']:>8.3f}"
        )
    print("JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
