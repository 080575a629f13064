"""Orchestrator throughput: episodes/s through dispatch, algorithm, packing and transport.

Inference and env are an instant in-process stand-in (each rollout returns a 64-token prompt
plus a 64-token completion at once), so the figure is the orchestrator's own ceiling. A
trainer thread reads every batch from ``batches/`` and publishes the next version at once.
The algorithm is the installed ``grpo`` when present, else a mean-baseline stand-in.

    .venv/bin/python benchmarks/orchestrator_throughput.py [--steps 20] [--batch-size 512]

Pinned to 2 CPU cores when the OS allows (the target is >= 2,000 episodes/s there). Also
printed: episodes per CPU-second of this process, which stays meaningful on a loaded machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Literal

from prl import hookimpl
from prl.contracts import Algorithm, AlgorithmConfig, Rendered, Renderer, RendererConfig, Task, Taskset, TasksetConfig
from prl.types import Branch, Trace

PROMPT, COMPLETION = 64, 64


class BenchTaskset(Taskset):
    id = "bench-instant"

    class Config(TasksetConfig):
        id: Literal["bench-instant"] = "bench-instant"
        """Tag."""

    def tasks(self, split="train"):
        return iter([Task(task_id=f"t{i}", prompt=[]) for i in range(1000)])

    async def rollout(self, task, client, renderer, sampling):  # pragma: no cover - never called
        raise NotImplementedError


class BenchRenderer(Renderer):
    name = "bench-ids"

    class Config(RendererConfig):
        name: Literal["bench-ids"] = "bench-ids"
        """Tag."""

    def render(self, messages, tools=None, add_generation_prompt=False):
        return Rendered([], [], [])

    def parse_response(self, token_ids, tools=None, prompt_ids=None):
        return {"content": ""}

    def get_stop_token_ids(self):
        return []


class MeanBaseline(Algorithm):
    type = "bench-baseline"

    class Config(AlgorithmConfig):
        type: Literal["bench-baseline"] = "bench-baseline"
        """Tag."""

    def score_group(self, group):
        mean = sum(t.reward for t in group) / len(group)
        for t in group:
            for b in t.branches:
                b.advantages = [(t.reward - mean) if s else 0.0 for s in b.sampled_mask]


class BenchPlugin:
    @hookimpl
    def prl_register_tasksets(self):
        return [BenchTaskset]

    @hookimpl
    def prl_register_renderers(self):
        return [BenchRenderer]

    @hookimpl
    def prl_register_algorithms(self):
        return [MeanBaseline]


class InstantEnv:
    """EnvSource stand-in: every rollout is an instant 128-token episode with reward 0/1."""

    def __init__(self):
        self.rng = random.Random(0)
        self.mask = [False] * PROMPT + [True] * COMPLETION
        self.logprobs = [0.0] * PROMPT + [-0.7] * COMPLETION

    async def start(self):
        pass

    def tasks(self):
        return [Task(task_id=f"t{i}", prompt=[]) for i in range(1000)]

    async def rollout(self, task, client, renderer, sampling, policy_version):
        ids = list(range(PROMPT + COMPLETION))
        branch = Branch(token_ids=ids, sampled_mask=self.mask, logprobs=self.logprobs, temperature=sampling.temperature)
        return Trace(trace_id=f"{self.rng.getrandbits(64):x}", task_id=task.task_id, env="bench", branches=[branch],
                     reward=float(self.rng.random() < 0.5), policy_version=policy_version)  # fmt: skip

    def check_alive(self):
        pass

    async def close(self):
        pass


class InstantWeights:
    def __init__(self):
        self.published = -1
        self.cond = threading.Condition()

    def publish(self, version):
        with self.cond:
            self.published = version
            self.cond.notify_all()

    async def connect(self, client):
        pass

    def receive(self, version, timeout, load=True):
        with self.cond:
            if not self.cond.wait_for(lambda: self.published >= version, timeout):
                raise TimeoutError(version)
        return None


class NoopClient:
    async def pause(self):
        pass

    async def resume(self):
        pass

    async def update_weights(self, weight_dir, version=None):
        pass


def trainer(run_dir: Path, weights: InstantWeights, steps: int, counts: list[int]) -> None:
    from prl.orchestrator.transport import read_batch

    weights.publish(0)
    for step in range(1, steps + 1):
        mbs = read_batch(run_dir, step, 0, timeout=120)
        counts.append(sum(1 for mb in mbs for t in mb["trace_ids"] if t))
        weights.publish(step)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--inflight", type=int, default=512)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 2:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])

    from prl.config.components import OrchestratorConfig
    from prl.orchestrator.loop import Orchestrator
    from prl.orchestrator.sources import resolve_source
    from prl.plugins import get_registry, register_inline

    register_inline(BenchPlugin(), "bench-plugin", "prl-benchmark")
    if "grpo" not in get_registry().classes("algorithms"):
        try:  # on a PYTHONPATH checkout without installed entry points
            import prl_algo_grpo.plugin as grpo_plugin

            register_inline(grpo_plugin, "grpo", "prl-algo-grpo")
        except ImportError:
            pass
    algo = "grpo" if "grpo" in get_registry().classes("algorithms") else "bench-baseline"
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        config = OrchestratorConfig.model_validate({
            "batch_size": args.batch_size, "seq_len": 2048, "max_steps": args.steps, "output_dir": tmp,
            "renderer": {"name": "bench-ids"},
            "concurrency": {"min_inflight": args.inflight, "max_inflight": args.inflight},
            "train": {"group_size": args.group_size, "algo": {"type": algo},
                      "source": [{"name": "bench", "env": {"taskset": {"id": "bench-instant"}}}]},
        })  # fmt: skip
        source = resolve_source(config.train, config.train.source[0], InstantEnv())
        weights, counts = InstantWeights(), []
        thread = threading.Thread(target=trainer, args=(run_dir, weights, args.steps, counts), daemon=True)
        orch = Orchestrator(config, run_dir, [source], NoopClient(), None, weights)
        thread.start()
        started, cpu_started = time.perf_counter(), time.process_time()
        asyncio.run(orch.run())
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        thread.join(10)
    episodes = orch.progress["total_episodes"]
    print(f"algorithm {algo}; {args.steps} steps x {args.batch_size} samples; trainer read {sum(counts)} samples")
    print(f"orchestrator throughput: {episodes / elapsed:,.0f} episodes/s ({episodes} episodes in {elapsed:.2f}s, "
          f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'} cores)")  # fmt: skip
    # On a shared machine wall time includes other processes' turns; CPU time does not.
    print(
        f"per CPU-second of this process (orchestrator + trainer thread): {episodes / cpu:,.0f} episodes/s "
        f"(load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
