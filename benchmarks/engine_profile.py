"""Where a decode step of the embedded engine spends its time, on a GPU or the CPU.

Runs the same closed-loop workload as ``inference_throughput.py`` (``c`` clients, mixed
16..64-token budgets, greedy, EOS ignored) through ``prl_inference_torch.engine.Engine`` with
its phases wrapped in timers that synchronise the device first, so each phase's wall time
includes the GPU work it queued: the model forward of a decode step, sampling and
bookkeeping (``_sample_into``), the cache row selection after a step, prefill (forward, cache
copy and the join with the running batch). Synchronising adds a little time to every phase;
the total is printed beside the unwrapped throughput measured first.

    python benchmarks/engine_profile.py --preset qwen3-0.6b --device cuda --dtype bfloat16 --levels 64,256

``--kernels`` also profiles one eager decode step of the slot pool (``c`` rows, the first
length block) with ``torch.profiler`` and prints its ten costliest kernels: what a captured
graph replays.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inference_throughput as it  # noqa: E402


class Timers:
    def __init__(self, device: str) -> None:
        self.device = device
        self.total: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)

    def wrap(self, obj, name: str, label: str) -> None:
        fn = getattr(obj, name)

        def timed(*a, **k):
            self._sync()
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self._sync()
                self.total[label] += time.perf_counter() - t
                self.count[label] += 1

        setattr(obj, name, timed)

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()


def profiled(model_dir, tokenizer, prompts, budgets, c, device, dtype) -> tuple[float, Timers]:
    from prl_inference_torch import engine as eng_mod
    from prl_inference_torch import kv as kv_mod
    from prl_inference_torch import slots as slots_mod

    timers = Timers(device)
    saved = {
        (eng_mod.Engine, n): getattr(eng_mod.Engine, n) for n in ("_decode", "_sample_into", "_prefill", "_set_lora")
    }
    saved.update({(kv_mod.BatchKV, n): getattr(kv_mod.BatchKV, n) for n in ("select", "join", "as_cache")})
    saved.update({(slots_mod.SlotDecoder, n): getattr(slots_mod.SlotDecoder, n) for n in ("step", "admit")})
    timers.wrap(slots_mod.SlotDecoder, "step", "slots.step (forward)")
    timers.wrap(slots_mod.SlotDecoder, "admit", "slots.admit")
    timers.wrap(eng_mod.Engine, "_decode", "decode (all)")
    timers.wrap(eng_mod.Engine, "_sample_into", "sample + bookkeeping")
    timers.wrap(eng_mod.Engine, "_prefill", "prefill (all)")
    timers.wrap(kv_mod.BatchKV, "select", "kv.select")
    timers.wrap(kv_mod.BatchKV, "join", "kv.join")
    timers.wrap(kv_mod.BatchKV, "as_cache", "kv.as_cache")
    try:
        rate = it.bench_engine(model_dir, tokenizer, prompts, budgets, c, device, dtype)
    finally:
        for (cls, n), fn in saved.items():
            setattr(cls, n, fn)
    return rate, timers


def kernel_table(model_dir: str, rows: int, device: str, dtype: str) -> str:
    """The costliest kernels of one eager slot-pool decode step over ``rows`` rows."""
    from prl_inference_torch.attention import register
    from prl_inference_torch.slots import SlotDecoder
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype), attn_implementation=register())
    model = model.to(device).eval()
    dec = SlotDecoder(model, rows, graphs=False)
    with torch.no_grad():
        for _ in range(3):  # warm-up: lazy initialisation and kernel choice
            dec._forward(rows, dec.capacity)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if device == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            dec._forward(rows, dec.capacity)
            if device == "cuda":
                torch.cuda.synchronize()
    key = "cuda_time_total" if device == "cuda" else "cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=10, max_name_column_width=60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny")
    p.add_argument("--levels", default="16,64")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--kernels", action="store_true", help="profile one eager slot decode step per level")
    args = p.parse_args()
    from prl_model_init import make_model
    from transformers import AutoTokenizer

    model_dir = str(make_model(Path(tempfile.mkdtemp(prefix="prl-engprof-")) / args.preset, preset=args.preset))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for c in [int(x) for x in args.levels.split(",")]:
        prompts, budgets = it.workload(tokenizer, max(8, 2 * c))
        plain = it.bench_engine(model_dir, tokenizer, prompts, budgets, c, args.device, args.dtype)
        rate, t = profiled(model_dir, tokenizer, prompts, budgets, c, args.device, args.dtype)
        steps = max(1, t.count["decode (all)"])
        print(f"concurrency {c}: {plain:,.0f} output tok/s unwrapped, {rate:,.0f} with timers; {steps} decode steps")
        for label in sorted(t.total, key=lambda k: -t.total[k]):
            per = 1e3 * t.total[label] / steps
            print(f"  {label:24s} {t.total[label]:8.2f} s  {t.count[label]:6d} calls  {per:8.2f} ms/decode step")
        if args.kernels:
            print(kernel_table(model_dir, c, args.device, args.dtype))


if __name__ == "__main__":
    main()
