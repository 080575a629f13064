"""Output tokens/s of prl's embedded inference engine against Hugging Face ``generate``.

Same model (``prl_model_init.make_model`` tiny preset unless ``--model``), same prompts, same
per-request ``max_tokens`` (mixed 16..64, EOS ignored so every request produces exactly
its budget), at 1, 16 and 64 concurrent requests. Each level serves ``max(8, 2c)`` requests
as a closed loop: ``c`` clients, each sending its next request as soon as the last returns.

* ``engine``: ``prl_inference_torch.engine.Engine`` in process (continuous batching, KV cache;
  on CUDA its slot cache with CUDA-graph decode steps, ``slots.py``).
* ``eng_eager`` (CUDA only): the same engine on its growing-cache path, eager forwards: what
  it ran on a GPU before CUDA graphs.
* ``http``: the same engine behind its HTTP server (``python -m prl_inference_torch``), driven
  through ``prl.client.InferenceHTTPClient`` -- what an orchestrator sees.
* ``hf_seq``: ``model.generate`` one request at a time (how a server without batching serves c
  clients), timed on the first 16 requests of a level.
* ``hf_batch``: ``model.generate`` on static batches of ``c`` left-padded prompts; a batch runs
  until its longest request is done, then the next batch starts.
* ``vllm``: printed when ``vllm`` imports and ``benchmarks/_vllm_bench.py`` exists; that module
  provides ``run(model_dir, prompts, max_tokens, concurrency) -> tokens_per_s``.

Ratios printed are engine / hf_seq and engine / hf_batch. On CUDA the engine serves the
workload once untimed before the timed pass (CUDA graphs are captured on first use) and
``hf_batch`` runs one untimed short batch first. Greedy decoding everywhere. The
engine uses its own ``prl_sdpa`` attention, the baselines transformers' default ``sdpa``.
Every side gets ``--threads`` torch threads (default 1: on a CPU shared with other
processes, OpenMP workers that wait on each other at every op make a tiny model tens of
times slower, for every contender alike).
Usage: ``python benchmarks/inference_throughput.py [--model DIR] [--levels 1,16,64] [--threads N]
[--device cuda --dtype bfloat16]``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch


def workload(tokenizer, n: int, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    import random

    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "reverse", "this", "text", "please", "sort", "letters"]
    prompts = [
        tokenizer.encode(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))), add_special_tokens=False)
        for _ in range(n)
    ]
    return prompts, [rng.choice([16, 32, 48, 64]) for _ in range(n)]


def bench_engine(
    model_dir: str, tokenizer, prompts, budgets, concurrency: int, device="cpu", dtype="float32", **engine_kw
) -> float:
    from prl_inference_torch.attention import register
    from prl_inference_torch.engine import Engine
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype), attn_implementation=register())
    model = model.to(device).eval()
    rows = max(64, concurrency)
    engine = Engine(model, tokenizer, max_model_len=2048, eos_ids=set(), max_batch_size=rows, **engine_kw)
    engine.start()
    if device == "cuda":
        # an untimed pass first: CUDA graphs are captured and kernels chosen on first use
        _closed_loop(engine, prompts, budgets, concurrency)
    elapsed = _closed_loop(engine, prompts, budgets, concurrency)
    engine.shutdown()
    return sum(budgets) / elapsed


def _closed_loop(engine, prompts, budgets, concurrency: int) -> float:
    """Serve every prompt with ``concurrency`` clients; the wall time it took."""
    from prl_inference_torch.engine import GenParams, Request

    queue = list(range(len(prompts)))
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
            done = threading.Event()
            req = Request(prompts[i], GenParams(max_tokens=budgets[i], temperature=0.0, ignore_eos=True))
            req.wake = lambda r=req, d=done: d.set() if r.done else None
            engine.submit(req)
            done.wait()

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def bench_hf_sequential(model, prompts, budgets) -> float:
    start = time.perf_counter()
    produced = 0
    for p, b in zip(prompts, budgets, strict=False):
        out = model.generate(
            torch.tensor([p], device=model.device),
            max_new_tokens=b,
            min_new_tokens=b,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
        produced += out.shape[1] - len(p)
    return produced / (time.perf_counter() - start)


def bench_hf_batched(model, prompts, budgets, batch: int) -> float:
    if model.device.type == "cuda":  # untimed warm-up, as the engine gets
        bench_hf_batched_timed(model, prompts[:batch], [4] * min(batch, len(prompts)), batch)
    return bench_hf_batched_timed(model, prompts, budgets, batch)


def bench_hf_batched_timed(model, prompts, budgets, batch: int) -> float:
    start = time.perf_counter()
    produced = 0
    for s in range(0, len(prompts), batch):
        ps, bs = prompts[s : s + batch], budgets[s : s + batch]
        width = max(len(p) for p in ps)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in ps], device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps], device=model.device)
        model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max(bs),
            min_new_tokens=max(bs),
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
        produced += sum(bs)  # tokens past a request's own budget are waste, not output
    return produced / (time.perf_counter() - start)


def bench_http(model_dir: str, prompts, budgets, levels: list[int], threads: int, device="cpu", dtype="float32"):
    from prl.client import InferenceHTTPClient
    from prl.types import Sampling

    work = Path(tempfile.mkdtemp(prefix="prl-bench-"))
    cfg = {
        "model": {"name": model_dir},
        "server": {"port": 0},
        "backend": {
            "type": "torch",
            "device": device,
            "dtype": dtype,
            "max_batch_size": max(64, *levels),
            "num_threads": threads,
            "ready_file": str(work / "ready"),
        },
    }
    (work / "cfg.json").write_text(json.dumps(cfg))
    proc = subprocess.Popen(
        [sys.executable, "-m", "prl_inference_torch", str(work / "cfg.json")],
        stdout=open(work / "log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        while not (work / "ready").exists():
            if proc.poll() is not None:
                raise RuntimeError((work / "log").read_text()[-2000:])
            time.sleep(0.2)
        url = (work / "ready").read_text().strip()

        async def level(c: int, n: int) -> float:
            async with InferenceHTTPClient(url) as client:
                todo = list(range(n))

                async def worker() -> int:
                    made = 0
                    while todo:
                        i = todo.pop(0)
                        gen = await client.generate_n(prompts[i], Sampling(temperature=0.0, max_tokens=budgets[i]), 1)
                        made += len(gen[0].token_ids)
                    return made

                start = time.perf_counter()
                made = sum(await asyncio.gather(*[worker() for _ in range(c)]))
                return made / (time.perf_counter() - start)

        return {c: asyncio.run(level(c, max(8, 2 * c))) for c in levels}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model directory (default: make_model tiny, seed 0)")
    parser.add_argument("--levels", default="1,16,64")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for every contender")
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP server measurement")
    parser.add_argument("--device", default="cpu", help="cpu or cuda, for every contender")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = args.model
    if model_dir is None:
        from prl_model_init import make_model

        model_dir = str(make_model(Path(tempfile.mkdtemp(prefix="prl-bench-model-")) / "tiny", preset="tiny", seed=0))
    # the engine never ends on EOS here; ignore_eos in the engine and eos_token_id=None in generate
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, args.dtype)).to(args.device).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    vllm_bench = None
    if importlib.util.find_spec("vllm") and (Path(__file__).parent / "_vllm_bench.py").exists():
        sys.path.insert(0, str(Path(__file__).parent))
        import _vllm_bench as vllm_bench  # noqa: F401

    print(f"model {model_dir}  torch threads {torch.get_num_threads()}  cpus {os.cpu_count()}")
    http = {}
    if not args.no_http:
        prompts, budgets = workload(tokenizer, max(8, 2 * max(levels)))
        http = bench_http(model_dir, prompts, budgets, levels, args.threads, args.device, args.dtype)
    rows = []
    with torch.no_grad():
        for c in levels:
            prompts, budgets = workload(tokenizer, max(8, 2 * c))
            eng = bench_engine(model_dir, tokenizer, prompts, budgets, c, args.device, args.dtype)
            # on a GPU, also the engine's growing-cache eager path (what it ran before CUDA graphs)
            old = None
            if args.device == "cuda":
                old = bench_engine(model_dir, tokenizer, prompts, budgets, c, args.device, args.dtype, slots=False)
            # a rate: 16 requests one at a time measure it as well as all of them would
            seq = bench_hf_sequential(model, prompts[:16], budgets[:16])
            bat = bench_hf_batched(model, prompts, budgets, c)
            vl = vllm_bench.run(model_dir, prompts, budgets, c) if vllm_bench else None
            rows.append((c, eng, old, http.get(c), seq, bat, vl))
    print(
        f"{'conc':>5} {'engine':>9} {'eng_eager':>9} {'http':>9} {'hf_seq':>9} {'hf_batch':>9} {'vllm':>9} "
        f"{'eng/hf_seq':>11} {'eng/hf_batch':>13}   (output tokens/s)"
    )
    for c, eng, old, ht, seq, bat, vl in rows:
        fmt = lambda v: f"{v:9.0f}" if v is not None else f"{'-':>9}"  # noqa: E731
        print(
            f"{c:>5} {fmt(eng)} {fmt(old)} {fmt(ht)} {fmt(seq)} {fmt(bat)} {fmt(vl)} "
            f"{eng / seq:>10.2f}x {eng / bat:>12.2f}x"
        )


if __name__ == "__main__":
    main()
