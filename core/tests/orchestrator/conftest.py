"""In-process stand-ins for the orchestrator tests: a counting taskset, a mean-baseline
algorithm, an instant inference client, an in-memory weight transport and a fake trainer
that consumes batches and publishes versions."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path
from typing import Literal

import pytest

from prl import hookimpl
from prl.contracts import Algorithm, AlgorithmConfig, Rendered, Renderer, RendererConfig, Task, Taskset, TasksetConfig
from prl.orchestrator.transport import read_batch
from prl.types import Branch, Generation, Trace


class CountTaskset(Taskset):
    """Task i: prompt of (i % 5) + 3 tokens; reward 1 when the first sampled token is even."""

    id = "orch-count"
    in_process = True

    class Config(TasksetConfig):
        id: Literal["orch-count"] = "orch-count"
        """Tag."""
        size: int = 10
        """Number of tasks."""
        completion: int = 6
        """Tokens generated per rollout."""
        delay: float = 0.0
        """Seconds each rollout sleeps (simulates inference latency)."""
        fail_every: int = 0
        """Raise in every n-th rollout (0: never)."""
        reward: float | None = None
        """The same reward for every rollout (None: 1 when the first sampled token is even)."""

    def __init__(self, config):
        super().__init__(config)
        self.calls = 0

    def tasks(self, split="train"):
        for i in range(self.config.size):
            yield Task(task_id=f"t{i}", prompt=[{"role": "user", "content": str(i)}], data={"i": i})

    async def rollout(self, task, client, renderer, sampling):
        self.calls += 1
        if self.config.fail_every and self.calls % self.config.fail_every == 0:
            raise RuntimeError("env exploded")
        if self.config.delay:
            await asyncio.sleep(self.config.delay)
        prompt = list(range(100, 100 + task.data["i"] % 5 + 3))
        sampling.max_tokens = self.config.completion
        gen = await client.generate(prompt, sampling)
        branch = Branch(
            token_ids=prompt + gen.token_ids,
            sampled_mask=[False] * len(prompt) + [True] * len(gen.token_ids),
            logprobs=[0.0] * len(prompt) + gen.logprobs,
            temperature=sampling.temperature,
        )
        reward = self.config.reward if self.config.reward is not None else float(gen.token_ids[0] % 2 == 0)
        return Trace(trace_id="", task_id=task.task_id, env="", branches=[branch], reward=reward)


class MeanBaseline(Algorithm):
    """A = r - mean(r) on sampled tokens (GRPO without options)."""

    type = "orch-baseline"

    class Config(AlgorithmConfig):
        type: Literal["orch-baseline"] = "orch-baseline"
        """Tag."""

    def score_group(self, group):
        mean = sum(t.reward for t in group) / len(group)
        for t in group:
            for b in t.branches:
                b.advantages = [(t.reward - mean) if s else 0.0 for s in b.sampled_mask]


class IdRenderer(Renderer):
    """Messages rendered as the code points of their contents (enough for config and tests)."""

    name = "orch-ids"

    class Config(RendererConfig):
        name: Literal["orch-ids"] = "orch-ids"
        """Tag."""

    def render(self, messages, tools=None, add_generation_prompt=False):
        ids = [ord(c) for m in messages for c in m.get("content", "")]
        return Rendered(ids, [0] * len(ids), ["user"] * len(ids))

    def parse_response(self, token_ids, tools=None, prompt_ids=None):
        return {"content": "".join(chr(i) for i in token_ids)}

    def get_stop_token_ids(self):
        return [0]


class StandinPlugin:
    @hookimpl
    def prl_register_renderers(self):
        return [IdRenderer]

    @hookimpl
    def prl_register_tasksets(self):
        return [CountTaskset]

    @hookimpl
    def prl_register_algorithms(self):
        return [MeanBaseline]


class InstantClient:
    """Token-in/token-out stand-in: seeded random tokens, instant; records admin calls."""

    base_url = "http://stand-in"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.calls: list[tuple] = []
        self.version = 0

    async def generate(self, prompt_ids, sampling):
        n = sampling.max_tokens or 4
        ids = [self.rng.randrange(1000) for _ in range(n)]
        return Generation(token_ids=ids, logprobs=[-0.5] * n, finish_reason="length", version=self.version)

    async def pause(self):
        self.calls.append(("pause",))

    async def resume(self):
        self.calls.append(("resume",))

    async def update_weights(self, weight_dir, version=None):
        self.calls.append(("update_weights", weight_dir))


class MemoryWeights:
    """Weight transport stand-in: the fake trainer publishes, the orchestrator receives."""

    def __init__(self):
        self.published: set[int] = set()
        self.acked: list[int] = []
        self.cond = threading.Condition()

    def publish(self, state_dict, version):
        with self.cond:
            self.published.add(version)
            self.cond.notify_all()

    async def connect(self, client):
        pass

    def receive(self, version, timeout, load=True):
        with self.cond:
            if not self.cond.wait_for(lambda: version in self.published, timeout):
                raise TimeoutError(f"version {version}")
            self.acked.append(version)
        return f"/weights/step_{version}"


class FakeTrainer(threading.Thread):
    """Reads batch S for every rank, 'trains' for ``step_time`` s, publishes version S."""

    def __init__(self, run_dir: Path, weights: MemoryWeights, steps: int, ranks=1, start=1, step_time=0.0):
        super().__init__(daemon=True)
        self.run_dir, self.weights, self.steps, self.ranks = run_dir, weights, steps, ranks
        self.start_step, self.step_time = start, step_time
        self.batches: dict[int, list[list[dict]]] = {}
        self.error: BaseException | None = None

    def run(self):
        try:
            self.weights.publish({}, self.start_step - 1)
            for step in range(self.start_step, self.steps + 1):
                self.batches[step] = [read_batch(self.run_dir, step, r, timeout=30) for r in range(self.ranks)]
                time.sleep(self.step_time)
                self.weights.publish({}, step)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc


class ListMonitor:
    prints_steps = False

    def __init__(self):
        self.rows: list[tuple[int, dict]] = []
        self.traces: list[dict] = []
        self.closed = False

    def log(self, metrics, step):
        self.rows.append((step, metrics))

    def log_traces(self, traces, step):
        self.traces += traces

    def close(self):
        self.closed = True


@pytest.fixture
def standins(register_plugin):
    register_plugin(StandinPlugin(), "orch-standins", "prl-orch-standins")
    return StandinPlugin


@pytest.fixture
def make_config(standins, tmp_path):
    from prl.config.components import OrchestratorConfig

    def _make(sources=None, **fields):
        sources = sources or [{"name": "count", "env": {"taskset": {"id": "orch-count"}}}]
        data = {
            "batch_size": 8,
            "seq_len": 64,
            "max_steps": 3,
            "output_dir": str(tmp_path),
            "train": {"group_size": 4, "algo": {"type": "orch-baseline"}, "source": sources},
            "renderer": {"name": "orch-ids"},
        }
        for key, value in fields.items():
            node = data
            *parents, leaf = key.split("__")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        return OrchestratorConfig.model_validate(data)

    return _make


@pytest.fixture
def kit():
    """The stand-in classes (conftest modules are not importable under importlib mode)."""
    import types

    return types.SimpleNamespace(
        InstantClient=InstantClient, MemoryWeights=MemoryWeights, FakeTrainer=FakeTrainer, ListMonitor=ListMonitor
    )
