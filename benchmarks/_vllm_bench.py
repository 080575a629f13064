"""vLLM leg of the inference-throughput benchmark: prl's ``vllm`` backend over HTTP.

``measure_vllm(model_dir, prompts, concurrency, max_tokens)`` starts the backend
(``python -m prl_inference_vllm``: float32, eager, 1 GiB CPU KV cache), fires every prompt
through ``POST /inference/v1/generate`` as a closed loop of ``concurrency`` clients (each
sends its next request when the last returns; greedy, EOS ignored, so each request yields
exactly its ``max_tokens``), stops the server and returns output tokens/s over the wall
time of the requests (server start excluded, reported separately as ``startup_s``).

``run(model_dir, prompts, max_tokens, concurrency)`` is the form
``benchmarks/inference_throughput.py`` calls once per concurrency level: it keeps one
server per model directory for the whole process (vLLM on CPU takes over a minute to
start) and returns tokens/s only.

    .venv/bin/python benchmarks/_vllm_bench.py [--model DIR] [--levels 1,16] [--requests 32]
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class VllmServer:
    """One ``prl_inference_vllm`` process on a free loopback port."""

    def __init__(
        self, model_dir: str, max_model_len: int = 1024, max_num_seqs: int = 64, start_timeout: float = 900.0
    ) -> None:
        self.model_dir = str(model_dir)
        self._dir = Path(tempfile.mkdtemp(prefix="prl-vllm-bench-"))
        ready = self._dir / "ready.txt"
        cfg = {
            "model": {"name": self.model_dir},
            "server": {"host": "127.0.0.1", "port": 0},
            "max_model_len": max_model_len,
            "log": {"level": "warning"},
            "backend": {
                "type": "vllm",
                "dtype": "float32",
                "gpu_memory_utilization": 0.3,
                "enforce_eager": True,
                "max_num_seqs": max_num_seqs,
                "ready_file": str(ready),
            },
        }
        (self._dir / "inference.json").write_text(json.dumps(cfg))
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
        t0 = time.monotonic()
        self.log_path = self._dir / "server.log"
        with self.log_path.open("wb") as log:
            argv = [sys.executable, "-m", "prl_inference_vllm", str(self._dir / "inference.json")]
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() - t0 > start_timeout:
                self.stop(keep_log=True)
                raise RuntimeError(f"vLLM server did not start; log: {self.log_path}")
            time.sleep(0.5)
        self.startup_s = time.monotonic() - t0
        self.url = ready.read_text().strip()

    def stop(self, keep_log: bool = False) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        if not keep_log:
            shutil.rmtree(self._dir, ignore_errors=True)


async def _closed_loop(
    url: str, model: str, prompts: list[list[int]], budgets: list[int], concurrency: int
) -> tuple[int, float]:
    import httpx

    queue = list(range(len(prompts)))
    produced = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal produced
        while queue:
            i = queue.pop()
            resp = await http.post(
                "/inference/v1/generate",
                json={
                    "token_ids": prompts[i],
                    "model": model,
                    "sampling_params": {"max_tokens": budgets[i], "temperature": 0.0, "ignore_eos": True},
                },
            )
            resp.raise_for_status()
            produced += sum(len(c["token_ids"]) for c in resp.json()["choices"])

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*[client(http) for _ in range(concurrency)])
        return produced, time.perf_counter() - t0


def _budgets(prompts: list[list[int]], max_tokens: int | list[int]) -> list[int]:
    return list(max_tokens) if isinstance(max_tokens, (list, tuple)) else [int(max_tokens)] * len(prompts)


def measure_vllm(
    model_dir: str, prompts: list[list[int]], concurrency: int, max_tokens: int | list[int]
) -> dict[str, float]:
    """Start the server, run the closed loop, stop the server; tokens/s and timings."""
    server = VllmServer(model_dir)
    try:
        tokens, seconds = asyncio.run(
            _closed_loop(server.url, server.model_dir, prompts, _budgets(prompts, max_tokens), concurrency)
        )
    finally:
        server.stop()
    return {"tokens_per_s": tokens / seconds, "tokens": tokens, "seconds": seconds, "startup_s": server.startup_s}


_SERVERS: dict[str, VllmServer] = {}


def run(model_dir: str, prompts: list[list[int]], max_tokens: int | list[int], concurrency: int) -> float:
    """tokens/s at one concurrency level, on a server kept for the rest of the process."""
    key = str(model_dir)
    if key not in _SERVERS:
        _SERVERS[key] = VllmServer(key)
        atexit.register(_SERVERS[key].stop)
    server = _SERVERS[key]
    tokens, seconds = asyncio.run(
        _closed_loop(server.url, server.model_dir, prompts, _budgets(prompts, max_tokens), concurrency)
    )
    return tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model directory (default: a fresh tiny prl_model_init model)")
    parser.add_argument("--levels", default="1,16", help="comma-separated concurrency levels")
    parser.add_argument("--requests", type=int, default=32, help="requests per level")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    model_dir = args.model
    if model_dir is None:
        from prl_model_init import make_model

        model_dir = str(make_model(Path(tempfile.mkdtemp(prefix="prl-tiny-")) / "tiny", preset="tiny", seed=0))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    prompts = [
        tok.encode(f"benchmark prompt number {i} " + "abc " * (i % 7), add_special_tokens=False)
        for i in range(args.requests)
    ]
    server = VllmServer(model_dir)
    print(f"model {model_dir}: server ready after {server.startup_s:.1f} s")
    try:
        for c in [int(x) for x in args.levels.split(",")]:
            tokens, seconds = asyncio.run(
                _closed_loop(server.url, server.model_dir, prompts, _budgets(prompts, args.max_tokens), c)
            )
            print(f"concurrency {c:>3}: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.1f} tokens/s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
