"""``prl eval``: one epoch over every source against a running inference server.

For each source the examples are its eval-split tasks after ``select`` (``-n`` caps them),
and each example is a *group* of ``k = group_size`` rollouts (source value, else the
top-level one). With ``r_ij`` the reward of rollout ``j`` of example ``i`` (n examples):

* ``avg@k  = mean_ij r_ij``;
* ``pass@k = mean_i 1[max_j r_ij >= 1]``: an example passes when one of its k rollouts
  earns full reward (the unbiased estimator with k = n samples reduces to this).

Rollouts of all sources share one in-flight limit between ``concurrency.min_inflight`` and
``max_inflight``: eval pins the band by default (a fixed limit); with min < max the limit
adapts to throughput as the orchestrator's does (:mod:`prl.orchestrator.concurrency`).
Failed or timed-out rollouts are counted (``num_failed``, ``has_error``, ``is_timeout``)
and left out of every reward and of avg@k and pass@k; when all of a source's rollouts fail
it has no reward metrics and ``prl eval`` exits 1. Before anything runs, ``prl eval``
checks that a server answers at ``client.base_url`` (exit 2 when none does).
Metrics go to every enabled monitor as one row per source, ``producer = "eval"``:
``eval/<env>/avg@k``, ``eval/<env>/pass@k``, ``eval/<env>/num_failed``,
``eval/<env>/all/<agent>/{reward,is_truncated,has_error}/mean``,
``eval/<env>/all/seq_len/mean``, ``eval/<env>/is_timeout/mean`` and each env metric as
``eval/<env>/<name>/mean``. Per-rollout results land in ``<run>/results/<env>.jsonl`` and
the per-source summary in ``<run>/results/<env>.json`` (its metrics plus ``failed_rollouts``
and ``first_error``).

Resume: after every ``ckpt.interval`` completed groups the cursor (completed groups so far)
and the completed groups' results are written atomically to
``checkpoints/step_<cursor>/evals/progress.pt`` (JSON content; the name follows the
checkpoint layout), then marked complete (:mod:`prl.layout`), keeping the newest
``keep_last``. ``--resume`` loads the newest one,
``--resume.step N`` that step, ``--resume.dir <run>/checkpoints/step_N`` another run's;
completed groups are skipped and a partly finished group runs again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from prl import layout
from prl.config.roots import EvalConfig
from prl.contracts.monitor import build_monitors
from prl.evalstats import failure_note, failures, rollout_record, summarize, trace_records
from prl.fsutil import write_atomic
from prl.live import LiveEpisodes
from prl.logs import FILE_ONLY, setup_logging
from prl.orchestrator.concurrency import AdaptiveGate
from prl.orchestrator.evals import eval_sampling
from prl.types import Sampling, Trace

log = logging.getLogger("prl.eval")

PROGRESS_VERSION = 1
PROGRESS_FILE = "progress.pt"
COMPONENTS = layout.COMPONENTS["eval"]


class Progress:
    """Completed groups per source, saved as cursor checkpoints (atomic write-then-rename)."""

    def __init__(self, config: EvalConfig, run_dir: Path) -> None:
        self.ckpt = config.ckpt
        self.root = layout.checkpoint_root(self.ckpt, run_dir)
        self.done: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
        self.cursor = 0
        self._since_save = 0

    def load(self, config: EvalConfig, run_dir: Path) -> Path | None:
        path = self._resume_path(config)
        if path is None:
            return None
        data = json.loads(path.read_text())
        if data.get("version") != PROGRESS_VERSION:
            raise ValueError(
                f"--resume: {path} has progress version {data.get('version')}, expected {PROGRESS_VERSION}"
            )
        for source, groups in data["groups"].items():
            self.done[source].update(groups)
        self.cursor = int(data["cursor"])
        return path

    def _resume_path(self, config: EvalConfig) -> Path | None:
        resume = config.resume
        plain = resume is not None and resume.dir is None and resume.step is None
        if plain and layout.latest_complete(self.root, COMPONENTS) is None:
            # Nothing saved yet (the run died before its first cursor): start over.
            log.info("--resume: no eval checkpoint under %s; starting from the beginning", self.root)
            return None
        step_dir = layout.find_resume(resume, self.root, COMPONENTS)
        return None if step_dir is None else layout.component_dir(step_dir, layout.EVALS) / PROGRESS_FILE

    def is_done(self, source: str, group: str) -> bool:
        return group in self.done.get(source, {})

    def complete(self, source: str, group: str, rows: list[dict[str, Any]]) -> None:
        self.done[source][group] = rows
        self.cursor += 1
        self._since_save += 1
        if self.ckpt is not None and self._since_save >= (self.ckpt.interval or 1):
            self.save()

    def save(self) -> None:
        if self.ckpt is None or self._since_save == 0:
            return
        self._since_save = 0
        step_dir = layout.step_dir(self.root, self.cursor)
        path = layout.begin(step_dir, layout.EVALS) / PROGRESS_FILE
        body = json.dumps({"version": PROGRESS_VERSION, "cursor": self.cursor, "groups": self.done})
        write_atomic(path, body, fsync=True)
        layout.mark_complete(step_dir, layout.EVALS)
        layout.retain(self.root, self.ckpt, COMPONENTS, upto=self.cursor)


# ---- running -------------------------------------------------------------------------
@dataclasses.dataclass
class _SourceRun:
    env: Any  # prl.envs.EnvSource
    name: str
    k: int
    sampling: Sampling
    tasks: list
    failure: str | None = None


def _attempt_config_dir(run_dir: Path) -> Path | None:
    env = os.environ.get("PRL_ATTEMPT_CONFIG_DIR")
    if env:
        return Path(env)
    latest = run_dir / "configs" / "latest"
    return latest.resolve() if latest.exists() else None


def _reset_results(path: Path, done: dict[str, list[dict[str, Any]]]) -> None:
    """Keep only rollouts of groups the progress file counts as complete (no duplicates)."""
    kept, seen = [], set()
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            key = (row.get("group"), row.get("index"))
            if row.get("group") in done and key not in seen:
                seen.add(key)
                kept.append(line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in kept))


class _Evaluator:
    def __init__(self, config: EvalConfig, run_dir: Path, progress: Progress, monitors: list) -> None:
        self.config, self.run_dir, self.progress, self.monitors = config, run_dir, progress, monitors
        # The orchestrator's AIMD controller: a pinned band (the default) is a fixed limit,
        # min < max lets the limit follow the server's throughput.
        band = config.concurrency
        self.gate = AdaptiveGate(band.min_inflight, band.max_inflight)
        self.live = LiveEpisodes(monitors)  # in-flight rollouts, for the dashboard

    async def run_source(self, run: _SourceRun, client: Any, renderer: Any, bar: Any, bar_id: Any) -> None:
        results = self.run_dir / "results" / f"{run.name}.jsonl"
        _reset_results(results, self.progress.done.get(run.name, {}))
        pending = [t for t in run.tasks if not self.progress.is_done(run.name, t.task_id)]
        bar.update(bar_id, completed=len(run.tasks) - len(pending))

        async def one(task: Any) -> Trace:
            trace_id = self.live.new_id()
            info = {"env": run.name, "task_id": task.task_id, "group": task.task_id, "kind": "eval", "version": 0}
            self.live.dispatch(trace_id, info)
            try:
                return await self.gate.run(
                    lambda: self.live.started(
                        trace_id, list(task.prompt), run.env.rollout(task, client, renderer, run.sampling, 0)
                    )
                )
            finally:
                self.live.drop_pending(trace_id)

        async def group(task: Any) -> None:
            traces = await asyncio.gather(*(one(task) for _ in range(run.k)))
            rows = [rollout_record(t, task.task_id, j) for j, t in enumerate(traces)]
            with results.open("a") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows)
            self.progress.complete(
                run.name, task.task_id, [{k: v for k, v in r.items() if k != "messages"} for r in rows]
            )
            records = trace_records(traces, task.task_id)
            for monitor in self.monitors:
                monitor.log_traces(records, 0)
            bar.advance(bar_id)

        async def watch() -> None:
            while True:
                await asyncio.sleep(1.0)
                run.env.check_alive()

        work = asyncio.ensure_future(asyncio.gather(*(group(t) for t in pending)))
        watcher = asyncio.ensure_future(watch())
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        watcher.cancel()
        if not work.done():
            work.cancel()
            run.failure = str(watcher.exception())
        await asyncio.gather(work, watcher, return_exceptions=True)
        if work.done() and not work.cancelled() and work.exception() is not None:
            run.failure = f"{type(work.exception()).__name__}: {work.exception()}"


async def _run(config: EvalConfig, run_dir: Path) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    from prl.envs import EnvServerDied, EnvSource
    from prl.orchestrator.run import build_client, build_renderer

    console = Console()
    progress = Progress(config, run_dir)
    loaded = progress.load(config, run_dir)
    if loaded is not None:
        console.print(f"Resuming eval from {loaded} ({progress.cursor} groups done)")
    monitors = build_monitors(config, run_dir, "eval")
    LiveEpisodes(monitors).clear()  # in-flight rollouts of a killed earlier attempt
    client, renderer = build_client(config), build_renderer(config)
    runs: list[_SourceRun] = []
    attempt = _attempt_config_dir(run_dir)
    try:
        for source in config.source:
            if source.select.limit is None and config.num_examples is not None:
                source = source.model_copy(
                    update={"select": source.select.model_copy(update={"limit": config.num_examples})}
                )
            env = EnvSource(source, "eval", run_dir, attempt_config_dir=attempt)
            runs.append(
                _SourceRun(env, source.name, source.group_size or config.group_size, eval_sampling(config, source), [])
            )
            try:
                await env.start()
                runs[-1].tasks = env.tasks()
            except EnvServerDied as exc:  # one unreachable env must not sink the others
                runs[-1].failure = str(exc)
        for monitor in monitors:
            monitor.log_plan({r.name: len(r.tasks) * r.k for r in runs}, step=0)
        evaluator = _Evaluator(config, run_dir, progress, monitors)
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Bar(*columns, console=console, transient=False) as bar:
            ids = [bar.add_task(r.name, total=len(r.tasks)) for r in runs]
            await asyncio.gather(
                *(evaluator.run_source(r, client, renderer, bar, i) for r, i in zip(runs, ids, strict=False))
            )
        progress.save()
        return _report(config, run_dir, runs, progress, monitors, console)
    finally:
        for r in runs:
            await r.env.close()
        for monitor in monitors:
            monitor.close()
        close = getattr(client, "aclose", None) or getattr(client, "close", None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                await result


def _report(
    config: EvalConfig, run_dir: Path, runs: list[_SourceRun], progress: Progress, monitors: list, console: Any
) -> int:
    code = 0
    for r in runs:
        groups = progress.done.get(r.name, {})
        metrics = summarize(r.name, groups, r.k)
        for monitor in monitors:
            monitor.log(metrics, 0)
        n_failed, total, first_error = failures(groups)
        # The per-source file says how many rollouts failed and why, next to the numbers
        # computed without them (a reader must not take a failure-free mean on trust).
        record = {**metrics, "failed_rollouts": n_failed, "first_error": first_error}
        (run_dir / "results" / f"{r.name}.json").write_text(json.dumps(record, indent=2))
        line = f"Evaluated {r.name} | {len(groups)} examples x {r.k} rollouts"
        reward = metrics.get(f"eval/{r.name}/avg@{r.k}")
        if reward is not None:
            line += f" | avg@{r.k} {reward:.4f} | pass@{r.k} {metrics[f'eval/{r.name}/pass@{r.k}']:.4f}"
            line += f" | Reward {reward:.4f}"
        note = failure_note(groups)
        if note:
            line += f" | {note}"
        if r.failure:
            line += f" | stopped early: {r.failure}"
        if r.failure or (total and n_failed == total):
            code = 1
        console.print(line, markup=False, highlight=False, soft_wrap=True)
        log.info(line, extra=FILE_ONLY)
    where = f"Results: {run_dir / 'results'} (<source>.json summaries, <source>.jsonl one line per rollout)"
    console.print(where, markup=False, highlight=False, soft_wrap=True)
    return code


def check_server(config: EvalConfig) -> None:
    """Fail in one line when nothing answers at ``client.base_url``: without this, every
    rollout would fail on its own connection error. A client without ``reachable`` (a
    plugin's, a test's scripted one) is not asked."""
    from prl.config.errors import HostError
    from prl.orchestrator import run as orchestrator_run

    async def probe() -> bool:
        client = orchestrator_run.build_client(config)
        try:
            reachable = getattr(client, "reachable", None)
            return reachable is None or await reachable()
        finally:
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()

    if not asyncio.run(probe()):
        raise HostError(f"no server at {config.client.base_url}: start `prl inference` or set --client.base-url")


def run_eval(config: EvalConfig, run_dir: Path, log_file: Path | None = None) -> int:
    """Evaluate every source of ``config`` once; results and metrics land in ``run_dir``,
    log lines also in ``log_file`` (``logs/attempt_N/eval.log`` under ``prl eval``)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(config.log, log_file)
    # One line per request would drown the progress bars; failures are still reported.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    return asyncio.run(_run(config, run_dir))
