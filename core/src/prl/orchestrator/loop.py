"""The orchestrator loop: dispatch groups, finalise them, assemble and ship batches.

Versions and steps: batch ``S`` (steps count from 1) is trained on the weights of version
``S - 1`` and produces version ``S``; ``V`` is the version inference serves now.

* Dispatch runs only while ``V >= S - 2`` (equivalently it stops while ``(S - 1) - V > 1``)
  and while work dispatched now could still be used for batch ``S``
  (``V >= S - 1 - max_off_policy_steps``). It keeps up to one batch of traces buffered or
  in flight, two when the next batch may already be collected too, and never more
  episodes in flight than the adaptive concurrency limit allows.
* A group's ``group_size`` episodes share one task and one dispatch version. When all
  finished, the source's algorithm scores the ok ones, the sampler sees the rewards, and
  the traces become samples (:mod:`prl.orchestrator.samples`) queued in the buffer.
* Batch ``S`` is shipped once the buffer holds ``batch_size`` counted traces and ``V >=
  S - 2``; at every weight update, in-flight groups already too stale for batch ``S`` are
  cancelled, and an online evaluation starts when ``V`` is a multiple of
  ``eval.interval`` (:mod:`prl.orchestrator.evals`).
* A stalled run says what it waits for: the stall watchdog
  (:mod:`prl.orchestrator.watchdog`, ``[orchestrator.watchdog]``) watches this loop from a
  thread and names inference, an env server, the trainer or the orchestrator itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prl.aio import wait_event
from prl.live import LiveEpisodes
from prl.orchestrator import checkpoint
from prl.orchestrator.buffer import FinishedGroup, GroupBuffer
from prl.orchestrator.concurrency import AdaptiveConcurrency
from prl.orchestrator.metrics import console_line, finite, rollout_metrics, trace_record
from prl.orchestrator.offpolicy import dispatch_budget, may_dispatch
from prl.orchestrator.packing import pack
from prl.orchestrator.rollout import open_sender
from prl.orchestrator.samples import MalformedTrace, TraceSamples, trace_to_samples
from prl.orchestrator.sources import SourceMixer, TrainSource
from prl.orchestrator.timed import TimedMetrics
from prl.orchestrator.watchdog import StallWatchdog
from prl.orchestrator.weights import WeightFollower
from prl.types import Sampling, Trace

if TYPE_CHECKING:
    from prl.config.components import OrchestratorConfig
    from prl.contracts import InferenceClient, Monitor, Renderer, WeightTransport
    from prl.orchestrator.evals import OnlineEval

log = logging.getLogger("prl.orchestrator")


class Orchestrator:
    """One RL run's orchestrator over already-built sources, client, renderer and transport."""

    def __init__(
        self,
        config: OrchestratorConfig,
        run_dir: Path,
        sources: list[TrainSource],
        client: InferenceClient,
        renderer: Renderer,
        weights: WeightTransport,
        monitors: list[Monitor] | None = None,
        evaluator: OnlineEval | None = None,
    ) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.sources = sources
        self.client = client
        self.renderer = renderer
        self.weights = weights
        self.monitors = monitors or []
        self.live = LiveEpisodes(self.monitors)  # in-flight episodes, for the dashboard
        self.evaluator = evaluator  # prl.orchestrator.evals.OnlineEval or None
        self._no_eval_at: int | None = None
        self.step = 1
        self.progress = {"total_samples": 0, "total_tokens": 0, "total_episodes": 0}
        self.buffer = GroupBuffer(config.batch_size, config.constant_trainer_batch_size, config.max_off_policy_steps)
        self.mixer = SourceMixer(sources, config.seed)
        self.concurrency = AdaptiveConcurrency(config.concurrency.min_inflight, config.concurrency.max_inflight)
        self.inflight: dict[asyncio.Task, int] = {}
        self.inflight_episodes = 0
        self.inflight_by_source: dict[str, int] = {}  # read by the stall watchdog
        self.last_arrival: float | None = None  # monotonic time the last group finished
        self.watchdog: StallWatchdog | None = None
        self.cancelled_groups = 0
        self.window: list[Trace] = []
        self.records: list[dict] = []
        self.follower: WeightFollower | None = None
        self._wake = asyncio.Event()
        self._arrived = asyncio.Event()
        self._fatal: BaseException | None = None
        self._groups = 0
        self.groups_dispatched = 0
        self.timed = TimedMetrics(self, self.monitors)  # the step: null rows
        self._last_ship = time.monotonic()
        self._seeded_step, self._seeded_groups = 0, 0
        self._shipping = False
        self.batches = None  # the rollout transport's sender, opened by _start

    # ---- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step - 1, "progress": dict(self.progress), "mixer": self.mixer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"]) + 1
        self.progress.update(state.get("progress", {}))
        self.mixer.load_state_dict(state["mixer"])

    # ---- main -------------------------------------------------------------------------
    async def run(self) -> int:
        dispatcher = None
        try:
            await self._start()
            self.timed.start()
            dispatcher = asyncio.create_task(self._dispatch_loop(), name="dispatcher")
            dispatcher.add_done_callback(self._task_failed)
            while self.config.max_steps is None or self.step <= self.config.max_steps:
                await self._ship_next()
            if self.config.max_steps is not None:
                # The trainer waits for an acknowledgement of its final version.
                await self.follower.wait_for(self.config.max_steps, self.config.weight_broadcast.timeout)
            if self.evaluator is not None:
                await self.evaluator.finish()
        finally:
            if dispatcher is not None:
                dispatcher.cancel()
            await self.timed.stop()
            await self._shutdown()
        return 0

    async def _start(self) -> None:
        # Frozen models first: a teacher that is down is a start-up error, not a stall.
        for algorithm in self._algorithms():
            await algorithm.start()
        self.batches = open_sender(self.config.rollout_transport, self.run_dir)
        self.live.clear()  # episodes a killed earlier orchestrator left in flight
        wait_ready = getattr(self.client, "wait_ready", None)
        if wait_ready is not None:
            log.info("waiting for inference at %s", getattr(self.client, "base_url", "?"))
            await wait_ready(timeout=self.config.client.timeout)
        await self.weights.connect(self.client)
        for source in self.sources:
            await source.env.start()
            source.make_sampler()
        first, loaded = 0, 0
        step_dir = checkpoint.resume_dir(self.config, self.run_dir)
        if step_dir is not None:
            self.load_state_dict(checkpoint.load_state(step_dir))
            # Inference started from the base model; the trainer re-broadcasts version N.
            first, loaded = self.step - 1, None
            self._no_eval_at = first  # evaluated before the checkpoint was taken
            log.info("resumed from %s: next batch is step %d", step_dir, self.step)
        if self.evaluator is not None:
            await self.evaluator.start()
        lora = self.config.model.lora
        if lora is not None:
            loaded = None  # inference has no adapter until the first version is loaded
        self.follower = WeightFollower(
            self.weights, self.client, first, loaded, on_update=self._on_version, adapter=lora.name if lora else None
        )
        self.follower.start(last=self.config.max_steps)
        if self.config.watchdog.enabled:
            self.watchdog = StallWatchdog(self, self.config.watchdog, asyncio.get_running_loop())
            self.watchdog.start()

    async def _shutdown(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        for task in list(self.inflight):
            task.cancel()
        await asyncio.gather(*self.inflight, return_exceptions=True)
        if self.batches is not None:
            self.batches.close()
        if self.follower is not None:
            await self.follower.stop()
        if self.evaluator is not None:
            await self.evaluator.close()
        for source in self.sources:
            await source.env.close()
            if source.client is not None:
                await source.client.aclose()
        for algorithm in self._algorithms():
            await algorithm.close()
        for monitor in self.monitors:
            monitor.close()
        aclose = getattr(self.client, "aclose", None)
        if aclose is not None:
            await aclose()

    def _algorithms(self) -> list[Any]:
        """Each source's algorithm once (sources may share one)."""
        return list({id(s.algorithm): s.algorithm for s in self.sources}.values())

    def _task_failed(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None and self._fatal is None:
            self._fatal = task.exception()
            self._arrived.set()

    def _raise_if_failed(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self.follower is not None:
            self.follower.check()

    # ---- dispatch ---------------------------------------------------------------------
    def _can_dispatch(self) -> bool:
        version = self.follower.version if self.follower else None
        if version is None or not self.mixer.sources:
            return False
        s = self.step
        if self.config.max_steps is not None and s > self.config.max_steps:
            return False
        # Deterministic runs sample batch S on version S - 1 only, so what a batch holds
        # does not depend on how fast the trainer is.
        max_off = 0 if self.config.deterministic else self.config.max_off_policy_steps
        if self.config.deterministic and self._shipping:
            return False  # batch S is taken: what is dispatched now belongs to S + 1
        if not may_dispatch(s, version, max_off):
            return False
        budget = dispatch_budget(s, version, max_off, self.config.batch_size)
        if self.buffer.count + self.inflight_episodes >= budget:
            return False
        return self.inflight_episodes < self.concurrency.limit

    async def _dispatch_loop(self) -> None:
        while True:
            self._wake.clear()
            # Deterministic runs dispatch in waves: the next groups start only once every
            # group in flight finished, so which groups fill a batch never depends on
            # which rollout happened to finish first.
            if not self.config.deterministic or not self.inflight:
                while self._can_dispatch():
                    self._launch(self.mixer.pick())
            await self._wake.wait()

    def _launch(self, source: TrainSource) -> None:
        task = source.sampler.next()
        version = self.follower.version
        group = asyncio.create_task(self._run_group(source, task, version, self._sampling(source)))
        self.inflight[group] = version
        self.inflight_episodes += source.group_size
        self.inflight_by_source[source.name] = self.inflight_by_source.get(source.name, 0) + source.group_size
        self.groups_dispatched += 1
        group.add_done_callback(self._group_done)

    def _group_done(self, task: asyncio.Task) -> None:
        self.inflight.pop(task, None)
        self._task_failed(task)
        self._wake.set()

    def _sampling(self, source: TrainSource) -> Sampling:
        """The source's sampling; in a deterministic run with a seed fixed by the step and the
        group's place in it (both restored on resume), not by wall-clock order."""
        if not self.config.deterministic:
            return source.sampling
        if self._seeded_step != self.step:
            self._seeded_step, self._seeded_groups = self.step, 0
        self._seeded_groups += 1
        seed = ((self.config.seed * 1_000_003 + self.step) * 65_537 + self._seeded_groups) * 1024
        return dataclasses.replace(source.sampling, seed=seed)

    async def _one(self, source: TrainSource, task: Any, version: int, sampling: Sampling, group: str) -> Trace:
        trace_id = self.live.new_id()
        info = {"env": source.name, "task_id": task.task_id, "group": group, "kind": "train", "version": version}
        self.live.dispatch(trace_id, info)
        try:
            # An algorithm sampling from a frozen model runs the rollouts against its server.
            client = source.client if source.client is not None else self.client
            work = source.env.rollout(task, client, self.renderer, sampling, version)
            trace = await self.live.started(trace_id, list(task.prompt), work)
        finally:
            self.inflight_episodes -= 1
            self.inflight_by_source[source.name] -= 1
            self._wake.set()
        self.concurrency.on_done(failed=trace.is_timeout)
        return trace

    async def _run_group(self, source: TrainSource, task: Any, version: int, sampling: Sampling) -> None:
        started = time.time()
        # Episodes of a group get distinct seeds (the base seed plus their index).
        each = [sampling if sampling.seed is None else dataclasses.replace(sampling, seed=sampling.seed + i)
                for i in range(source.group_size)]  # fmt: skip
        group = f"d{self.groups_dispatched}"  # live rows only; finished rows get g<N> in arrival order
        traces = await asyncio.gather(
            *(self._one(source, task, version, each[i], group) for i in range(source.group_size))
        )
        scored = [t for t in traces if t.ok and t.branches]
        if scored:
            source.algorithm.score_group(scored)
            await source.algorithm.ref_logprobs(scored, task, self.client, self.renderer)
        self._finalise(source, task, version, list(traces), started)

    def _finalise(self, source: TrainSource, task: Any, version: int, traces: list[Trace], started: float) -> None:
        source.sampler.observe(task.task_id, [t.reward for t in traces])
        # Curriculum admission gates: a group outside the source's mean-reward band is seen
        # by the metrics and the sampler but never trained on.
        admitted = source.config.sampler.admits([t.reward for t in traces if t.ok and t.branches])
        source.rejected_groups += not admitted
        converted = []
        for trace in traces if admitted else []:
            try:
                converted.append(trace_to_samples(trace, self.config.seq_len, source.min_abs_advantage))
            except MalformedTrace as exc:
                trace.error = f"MalformedTrace: {exc}"
                converted.append(TraceSamples(trace))
        self.window.extend(traces)
        self.last_arrival = time.monotonic()
        if self.monitors:
            self._groups += 1
            now = time.time()
            self.records += [trace_record(t, f"g{self._groups}", version, now, now - started) for t in traces]
        if converted:
            self.buffer.add(FinishedGroup(version, converted))
        self._arrived.set()

    def _on_version(self, version: int) -> None:
        """Cancel in-flight groups that became too stale for the batch being collected."""
        oldest = self.buffer.min_version(self.step)
        for task, dispatched in list(self.inflight.items()):
            if dispatched < oldest:
                task.cancel()
                self.cancelled_groups += 1
        if self.evaluator is not None and self.evaluator.due(version) and version != self._no_eval_at:
            self.evaluator.launch(version)
        self._wake.set()

    # ---- batches ----------------------------------------------------------------------
    async def _collect(self, step: int) -> None:
        # A stall shows as no step finishing; the watchdog thread reports it.
        while not self.buffer.ready(step):
            self._raise_if_failed()
            self._check_sources()
            self._arrived.clear()
            self._wake.set()
            await wait_event(self._arrived, 1.0)

    def _check_sources(self) -> None:
        for source in list(self.mixer.sources):
            check = getattr(source.env, "check_alive", None)
            if check is None:
                continue
            try:
                check()
            except Exception as exc:
                if source.config.env.on_failure == "stop" or len(self.mixer.sources) == 1:
                    raise
                log.error("%s; training continues on the other sources (env.on_failure = continue)", exc)
                index = self.mixer.sources.index(source)
                self.mixer.sources.pop(index)
                self.mixer.weights.pop(index)

    async def _ship_next(self) -> None:
        step = self.step
        await self._collect(step)
        self._shipping = True
        batch = self.buffer.take(step)
        wait = 0.0
        if step - 2 >= 0:
            wait = await self.follower.wait_for(step - 2, self.config.weight_broadcast.timeout)
        samples = batch.samples
        ranks = pack(samples, self.config.seq_len, self.config.num_train_workers)
        self.batches.send(step, ranks)
        tokens = sum(len(s.input_ids) for s in samples)
        self.progress["total_samples"] += len(samples)
        self.progress["total_tokens"] += tokens
        self.progress["total_episodes"] += len(self.window)
        self.step = step + 1
        self._shipping = False
        if checkpoint.is_due(self.config, step):
            checkpoint.save_state(checkpoint.checkpoint_root(self.config, self.run_dir), step, self.state_dict())
        self._report(step, batch, ranks, tokens, wait)
        self._wake.set()

    def _report(self, step: int, batch: Any, ranks: list, tokens: int, wait: float) -> None:
        now = time.monotonic()
        m = rollout_metrics(self.window)
        m.update(self.buffer.pop_counters())
        m.update(self.concurrency.metrics())
        lags = batch.lags or [0]
        m.update({
            "off_policy/mean_steps": sum(lags) / len(lags),
            "off_policy/max_steps": float(max(lags)),
            "off_policy/cancelled_groups": float(self.cancelled_groups),
            "batch/traces": float(len(batch.traces)),
            "batch/samples": float(sum(len(t.samples) for t in batch.traces)),
            "batch/pruned_traces": float(batch.pruned),
            "batch/overlong_samples": float(sum(t.overlong for t in batch.traces)),
            "batch/tokens": float(tokens),
            "batch/micro_batches": float(sum(len(r) for r in ranks)),
            "concurrency/inflight": float(self.inflight_episodes),
            "time/step": now - self._last_ship,
            "time/wait_for_policy": wait,
            "progress/step": float(step),
            "progress/policy_version": float(self.follower.version or 0),
            **{f"progress/{k}": float(v) for k, v in self.progress.items()},
        })  # fmt: skip
        for source in self.sources:
            for key, value in source.sampler.metrics().items():
                m[f"curriculum/{source.name}/{key}"] = value
            m[f"curriculum/{source.name}/rejected_groups"] = float(source.rejected_groups)
            source.rejected_groups = 0
        self.cancelled_groups = 0
        self._last_ship = now
        m = finite(m)
        for monitor in self.monitors:
            monitor.log(m, step)
            if self.records:
                monitor.log_traces(self.records, step)
        self.window, self.records = [], []
        if not any(mon.prints_steps for mon in self.monitors):
            print(console_line(step, m), flush=True)
