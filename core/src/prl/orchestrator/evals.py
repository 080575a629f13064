"""Evaluations during RL training (``[orchestrator.eval]``).

When inference starts serving a policy version ``v`` with ``v % interval == 0`` (v > 0),
every eval source runs its selected eval-split tasks with ``k`` rollouts each, in the
background, alongside training rollouts and at most ``max_inflight`` eval rollouts at a
time. The group's ``select``, ``num_examples`` (the default ``select.limit``),
``group_size`` (``k``) and ``sampling`` fill what a source leaves unset, at validation
(:mod:`prl.config.eval_defaults`); unset sampling fields keep the server defaults.

Metrics are those of ``prl eval`` (``eval/<env>/avg@k``, ``eval/<env>/pass@k``, ...), logged
at step ``v`` with producer ``orch``, and each rollout as a trace (``kind = "eval"``).
Evaluations still running when training ends are
awaited so the final one is not lost.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from prl.live import LiveEpisodes
from prl.types import Sampling

if TYPE_CHECKING:
    from prl.config.components import EvalGroupConfig, SourceConfig
    from prl.config.roots import EvalConfig
    from prl.contracts import InferenceClient, Monitor, Renderer
    from prl.envs.source import EnvSource

log = logging.getLogger("prl.orchestrator")


def eval_sampling(group: EvalGroupConfig | EvalConfig, source: SourceConfig) -> Sampling:
    """The group's ``[sampling]`` overlaid by the source's; unset fields keep Sampling's
    defaults. ``prl eval`` uses it too, with the eval config as the group."""
    merged = {**group.sampling.model_dump(exclude_none=True), **source.sampling.model_dump(exclude_none=True)}
    return Sampling(
        temperature=merged.get("temperature", 1.0),
        top_p=merged.get("top_p", 1.0),
        top_k=merged.get("top_k"),
        max_tokens=merged.get("max_completion_tokens"),
        seed=merged.get("seed"),
    )


class OnlineEval:
    """Background evaluations of the current policy (see module docstring)."""

    def __init__(
        self,
        config: EvalGroupConfig,
        envs: dict[str, EnvSource],
        client: InferenceClient,
        renderer: Renderer,
        monitors: list[Monitor],
        max_inflight: int,
    ) -> None:
        self.config = config
        self.envs = envs
        self.client = client
        self.renderer = renderer
        self.monitors = monitors
        self.limit = asyncio.Semaphore(max_inflight)
        self.live = LiveEpisodes(monitors)  # the orchestrator's monitors; it clears orphans
        self.tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        for env in self.envs.values():
            await env.start()

    def due(self, version: int) -> bool:
        return version > 0 and version % self.config.interval == 0

    def launch(self, version: int) -> None:
        self.tasks.append(asyncio.create_task(self.run(version), name=f"eval-{version}"))

    async def run(self, version: int) -> dict[str, float]:
        from prl.evalstats import failure_note, summarize

        metrics: dict[str, float] = {}
        notes: list[str] = []
        for source in self.config.source:
            k = source.group_size or self.config.group_size
            groups = await self._source(source, k, version)
            metrics.update(summarize(source.name, groups, k))
            note = failure_note(groups)
            if note:  # the means above leave these rollouts out: say how many and why
                notes.append(f"{source.name}: {note}")
        for monitor in self.monitors:
            monitor.log(metrics, version)
        headline = {k: v for k, v in metrics.items() if "/avg@" in k or "/pass@" in k}
        shown = [f"{k.split('/')[1]} {k.rsplit('/', 1)[1]} {v:.4f}" for k, v in headline.items()]
        print(" | ".join([f"Eval step {version}", *shown, *notes]), flush=True)
        return metrics

    async def _source(self, source: Any, k: int, version: int) -> dict[str, list[dict]]:
        from prl.evalstats import rollout_record, trace_records

        env = self.envs[source.name]
        tasks = env.tasks()  # select.limit carries the group's num_examples (eval_defaults)
        sampling = eval_sampling(self.config, source)

        async def one(task: Any):
            trace_id = self.live.new_id()
            info = {"env": source.name, "task_id": task.task_id, "group": task.task_id, "kind": "eval"}
            self.live.dispatch(trace_id, {**info, "version": version})
            try:
                async with self.limit:
                    work = env.rollout(task, self.client, self.renderer, sampling, version)
                    return await self.live.started(trace_id, list(task.prompt), work)
            finally:
                self.live.drop_pending(trace_id)

        async def group(task: Any) -> tuple[str, list[dict]]:
            traces = await asyncio.gather(*(one(task) for _ in range(k)))
            for monitor in self.monitors:  # the rollouts themselves, for the traces view
                monitor.log_traces(trace_records(traces, task.task_id), version)
            return task.task_id, [rollout_record(t, task.task_id, j) for j, t in enumerate(traces)]

        return dict(await asyncio.gather(*(group(t) for t in tasks)))

    async def finish(self) -> None:
        """Wait for evaluations still running; a failed one is logged, not fatal."""
        for task in self.tasks:
            try:
                await task
            except Exception as exc:  # noqa: BLE001 - an eval failure must not fail training
                log.error("evaluation %s failed: %s: %s", task.get_name(), type(exc).__name__, exc)
        self.tasks.clear()

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for env in self.envs.values():
            await env.close()
