"""``prl eval``: one epoch over every source against a running inference server.

For each source the examples are its eval-split tasks after ``select`` (``-n`` caps them),
and each example is a *group* of ``k = group_size`` rollouts (source value, else the
top-level one). With ``r_ij`` the reward of rollout ``j`` of example ``i`` (n examples):

* ``avg@k  = mean_ij r_ij``;
* ``pass@k = mean_i 1[max_j r_ij >= 1]``: an example passes when one of its k rollouts
  earns full reward (the unbiased estimator with k = n samples reduces to this).

Rollouts of all sources share one in-flight bound, ``concurrency.max_inflight`` (eval
pins the band; with min < max the upper end is used). Failed or timed-out rollouts count
with reward 0 and are reported under ``has_error`` and
``is_timeout``. Metrics go to every enabled monitor as one row per source, ``producer =
"eval"``: ``eval/<env>/avg@k``, ``eval/<env>/pass@k``,
``eval/<env>/all/<agent>/{reward,is_truncated,has_error}/mean``,
``eval/<env>/all/seq_len/mean``, ``eval/<env>/is_timeout/mean`` and each env metric as
``eval/<env>/<name>/mean``. Per-rollout results land in ``<run>/results/<env>.jsonl`` and
the per-source summary in ``<run>/results/<env>.json``.

Resume: after every ``ckpt.interval`` completed groups the cursor (completed groups so far)
and the completed groups' results are written atomically to
``checkpoints/step_<cursor>/evals/progress.pt`` (JSON content; the name follows the
checkpoint layout), keeping the newest ``keep_last``. ``--resume`` loads the newest one,
``--resume.step N`` that step, ``--resume.dir <run>/checkpoints/step_N`` another run's;
completed groups are skipped and a partly finished group runs again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

from prl.config.roots import EvalConfig
from prl.contracts.monitor import build_monitors
from prl.fsutil import write_atomic
from prl.orchestrator.evals import eval_sampling
from prl.types import Sampling, Trace

log = logging.getLogger("prl.eval")

PROGRESS_VERSION = 1


# ---- results -------------------------------------------------------------------------
def rollout_record(trace: Trace, group: str, index: int) -> dict[str, Any]:
    """The compact per-rollout result kept in progress files and results/<env>.jsonl."""
    return {
        "group": group,
        "index": index,
        "task_id": trace.task_id,
        "trace_id": trace.trace_id,
        "reward": trace.reward,
        "agent_rewards": dict(trace.agent_rewards),
        "agents": sorted({b.agent for b in trace.branches}),
        "metrics": dict(trace.metrics),
        "seq_len": sum(len(b.token_ids) for b in trace.branches),
        "turns": trace.turns,
        "is_truncated": trace.is_truncated,
        "is_timeout": trace.is_timeout,
        "error": trace.error,
        "messages": trace.messages,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(env: str, groups: dict[str, list[dict[str, Any]]], k: int) -> dict[str, float]:
    """Metrics of one source from its completed groups (see the module docstring)."""
    rows = [r for g in groups.values() for r in g]
    if not rows:
        return {}
    p = f"eval/{env}"
    out = {
        f"{p}/avg@{k}": _mean([r["reward"] for r in rows]),
        f"{p}/pass@{k}": _mean([float(max(r["reward"] for r in g) >= 1.0) for g in groups.values() if g]),
        f"{p}/all/seq_len/mean": _mean([float(r["seq_len"]) for r in rows]),
        f"{p}/is_timeout/mean": _mean([float(r["is_timeout"]) for r in rows]),
        f"{p}/num_examples": float(len(groups)),
        f"{p}/num_rollouts": float(len(rows)),
    }
    per_agent: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        agents = r["agent_rewards"] or {"default": r["reward"]}
        for agent, reward in agents.items():
            per_agent[agent]["reward"].append(reward)
            per_agent[agent]["is_truncated"].append(float(r["is_truncated"]))
            per_agent[agent]["has_error"].append(float(r["error"] is not None or r["is_timeout"]))
    for agent, fields in per_agent.items():
        for name, values in fields.items():
            out[f"{p}/all/{agent}/{name}/mean"] = _mean(values)
    env_metrics: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        for name, value in r["metrics"].items():
            env_metrics[name].append(float(value))
    for name, values in env_metrics.items():
        out[f"{p}/{name}/mean"] = _mean(values)
    return out


# ---- cursor checkpoints --------------------------------------------------------------
class Progress:
    """Completed groups per source, saved as cursor checkpoints (atomic write-then-rename)."""

    def __init__(self, config: EvalConfig, run_dir: Path) -> None:
        self.ckpt = config.ckpt
        self.root = Path(self.ckpt.output_dir) if self.ckpt and self.ckpt.output_dir else run_dir / "checkpoints"
        self.done: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
        self.cursor = 0
        self._since_save = 0

    def load(self, config: EvalConfig, run_dir: Path) -> Path | None:
        path = self._resume_path(config, run_dir)
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

    def _resume_path(self, config: EvalConfig, run_dir: Path) -> Path | None:
        resume = config.resume
        if resume is None:
            return None
        if resume.dir is not None:
            step_dir = Path(resume.dir)
            if not re.fullmatch(r"step_\d+", step_dir.name):
                raise ValueError(f"--resume.dir must end in step_<digits>, got {step_dir}")
        elif resume.step is not None:
            step_dir = self.root / f"step_{resume.step}"
        else:
            steps = self._steps()
            if not steps:
                log.info("--resume: no eval checkpoint under %s; starting from the beginning", self.root)
                return None
            step_dir = self.root / f"step_{steps[-1]}"
        path = step_dir / "evals" / "progress.pt"
        if not path.exists():
            raise FileNotFoundError(f"--resume: no eval progress at {path}")
        return path

    def _steps(self) -> list[int]:
        if not self.root.exists():
            return []
        found = [int(p.name[5:]) for p in self.root.glob("step_*") if re.fullmatch(r"step_\d+", p.name)]
        return sorted(s for s in found if (self.root / f"step_{s}" / "evals" / "progress.pt").exists())

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
        path = self.root / f"step_{self.cursor}" / "evals" / "progress.pt"
        write_atomic(path, json.dumps({"version": PROGRESS_VERSION, "cursor": self.cursor, "groups": self.done}))
        self._retain()

    def _retain(self) -> None:
        keep_last, keep_interval = self.ckpt.keep_last, self.ckpt.keep_interval
        if keep_last is None and keep_interval is None:
            return
        steps = self._steps()
        keep = set(steps[-keep_last:]) if keep_last else set()
        if keep_interval:
            keep |= {s for s in steps if s % keep_interval == 0}
        for step in steps:
            if step not in keep:
                shutil.rmtree(self.root / f"step_{step}", ignore_errors=True)


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


def _write_plan(run_dir: Path, runs: list[_SourceRun]) -> None:
    path = run_dir / "monitors" / "file" / "plan.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    plan = json.loads(path.read_text()) if path.exists() else {}
    for r in runs:
        plan[r.name] = {"0": len(r.tasks) * r.k}
    write_atomic(path, json.dumps(plan, indent=2))


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
        self.inflight = asyncio.Semaphore(config.concurrency.max_inflight)

    async def run_source(self, run: _SourceRun, client: Any, renderer: Any, bar: Any, bar_id: Any) -> None:
        results = self.run_dir / "results" / f"{run.name}.jsonl"
        _reset_results(results, self.progress.done.get(run.name, {}))
        pending = [t for t in run.tasks if not self.progress.is_done(run.name, t.task_id)]
        bar.update(bar_id, completed=len(run.tasks) - len(pending))

        async def one(task: Any) -> Trace:
            async with self.inflight:
                return await run.env.rollout(task, client, renderer, run.sampling, 0)

        async def group(task: Any) -> None:
            traces = await asyncio.gather(*(one(task) for _ in range(run.k)))
            rows = [rollout_record(t, task.task_id, j) for j, t in enumerate(traces)]
            with results.open("a") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows)
            self.progress.complete(
                run.name, task.task_id, [{k: v for k, v in r.items() if k != "messages"} for r in rows]
            )
            records = [{**dataclasses.asdict(t), "kind": "eval", "group": task.task_id} for t in traces]
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
    from prl.orchestrator import build_client, build_renderer

    console = Console()
    progress = Progress(config, run_dir)
    loaded = progress.load(config, run_dir)
    if loaded is not None:
        console.print(f"Resuming eval from {loaded} ({progress.cursor} groups done)")
    monitors = build_monitors(config, run_dir, "eval")
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
        if "file" in type(config.monitors).model_fields and getattr(config.monitors, "file", None) is not None:
            _write_plan(run_dir, runs)
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
        (run_dir / "results" / f"{r.name}.json").write_text(json.dumps(metrics, indent=2))
        reward = metrics.get(f"eval/{r.name}/avg@{r.k}", 0.0)
        line = (
            f"Evaluated {r.name} | {len(groups)} examples x {r.k} rollouts"
            f" | avg@{r.k} {reward:.4f}"
            f" | pass@{r.k} {metrics.get(f'eval/{r.name}/pass@{r.k}', 0.0):.4f} | Reward {reward:.4f}"
        )
        if r.failure:
            code = 1
            line += f" | stopped early: {r.failure}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return code


def run_eval(config: EvalConfig, run_dir: Path) -> int:
    """Evaluate every source of ``config`` once; results and metrics land in ``run_dir``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=config.log.level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per request would drown the progress bars; failures are still reported.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    return asyncio.run(_run(config, run_dir))
