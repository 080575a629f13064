"""The ``prime`` monitor (off by default; ``[monitors.prime]``): runs on the Prime Intellect
platform, through its published SDK ``prime-runs``.

What a process opens depends on its producer:

* ``orch`` and ``trainer``: one **training run** (``kind = "train"``). Every row with a step
  goes to ``log_metrics``, finished episodes to ``log_traces``. Under ``prl rl`` the shared
  ``[monitors.prime]`` reaches the orchestrator only (its run carries rewards, evals and
  rollouts, the curves the platform shows), so one prl run is one platform run. ``prl sft``
  opens it from the trainer.
* ``eval`` and ``online-eval``: one **platform evaluation** per source (``kind = "eval"``),
  opened the first time the source shows up (its plan, an ``eval/<source>/...`` metric or
  one of its episodes). The source's newest ``eval/<source>/*`` numbers (and their ``step``)
  are the evaluation's summary; its episodes are its traces.

Rows keyed by time (``step: null``: ``inference/*``, ``event_loop_lag/*``, ...) describe the
process, not the model, and stay local (file monitor). Platform names default to
``run.name``.

``mode`` (or ``$PRIME_RUNS_MODE``) is ``online`` or ``disabled``; unset, prime-runs goes
online when it finds an API key (``PRIME_API_KEY`` or ``prime login``) and is disabled,
with one warning, when not. Disabled, nothing leaves the machine: runs get local ids
(``disabled-<hex>``) and ``run.json`` is written all the same.

``<run_dir>/monitors/prime/run.json`` lists every platform run this prl run opened
(:mod:`prl_monitor_prime.runfile`); uploads happen on prime-runs' own threads, so a slow
platform never holds up a step.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from prl.config.errors import ConfigError, RunError
from prl.contracts.monitor import Monitor, MonitorConfig
from prl_monitor_prime import runfile

log = logging.getLogger("prl.monitors.prime")

EVAL_PRODUCERS = frozenset({"eval", "online-eval"})


class PrimeMonitor(Monitor):
    """Opens platform runs through ``prime_runs.init`` and feeds them metrics and episodes."""

    key: ClassVar[str] = "prime"
    enabled_by_default: ClassVar[bool] = False
    rl_components: ClassVar[tuple[str, ...]] = ("orchestrator",)  # one platform run per prl run

    class Config(MonitorConfig):
        """``[monitors.prime]``."""

        name: str | None = None
        """Platform run name; None uses the prl run name (``run.name``)."""
        mode: Literal["online", "disabled"] | None = None
        """prime-runs mode; None leaves it to $PRIME_RUNS_MODE, else online when an API key is found."""
        team_id: str | None = None
        """Team to create runs for (training runs need one); None uses $PRIME_TEAM_ID or your login's."""
        tags: list[str] = []
        """Run tags."""
        description: str | None = None
        """Run description shown on the platform."""
        log_traces: bool = True
        """Upload finished episodes."""
        finish_timeout: Annotated[float, Field(ge=0)] | None = None
        """Seconds ``close`` waits for queued uploads; None uses prime-runs' default."""

    config: Config

    def __init__(self, config: Config, run_dir: Path, producer: str, run_name: str = "") -> None:
        super().__init__(config, run_dir, producer, run_name)
        import prime_runs

        self._sdk = prime_runs
        self.name = config.name or run_name or self.run_dir.name
        self.dir = self.run_dir / "monitors" / "prime"
        self.kind = "eval" if producer in EVAL_PRODUCERS else "train"
        self.meta = runfile.resolved_meta(self.run_dir, producer)
        self.runs: dict[str | None, Any] = {}  # source (None: the training run) -> prime_runs.Run
        if self.kind == "train":
            self._open(None)

    # ---- runs -------------------------------------------------------------------------
    def _open(self, source: str | None) -> Any:
        """The platform run for ``source`` (None: the training run), opened on first use."""
        if source in self.runs:
            return self.runs[source]
        cfg = self.config
        kwargs: dict[str, Any] = {
            "name": self.name if source is None else f"{self.name}/{source}",
            "model": self.meta.get("model"),
            "framework": "prl",
            "description": cfg.description,
            "tags": cfg.tags,
            "mode": cfg.mode,
            "team_id": cfg.team_id,
            "finish_timeout": cfg.finish_timeout,
            "kind": self.kind,
            "environments": [source] if source is not None else self.meta.get("environments") or [],
        }
        if self.kind == "train":
            kwargs["training"] = self._sdk.TrainingSpec(**self.meta.get("training", {}))
        try:
            run = self._sdk.init(**kwargs)
        except self._sdk.ConfigurationError as exc:
            raise ConfigError(f"monitors.prime: {exc}") from None
        except Exception as exc:  # the platform refused or could not be reached: one line, exit 1
            raise RunError(f"monitors.prime: could not open the platform run: {type(exc).__name__}: {exc}") from None
        self.runs[source] = run
        runfile.record(self.dir, self._entry(source, run, "running"))
        log.info("prime: %s run %s (%s)%s", run.kind, run.id, run.mode, f" {run.url}" if run.url else "")
        return run

    def _entry(self, source: str | None, run: Any, status: str) -> dict[str, Any]:
        return {
            "producer": self.producer,
            "source": source,
            "kind": run.kind,
            "id": run.id,
            "name": run.name or (self.name if source is None else f"{self.name}/{source}"),
            "url": run.url,
            "mode": run.mode,
            "status": status,
        }

    # ---- Monitor ------------------------------------------------------------------------
    def log(self, metrics: dict[str, float], step: int | None) -> None:
        if step is None:
            return  # process health rows stay local (module docstring)
        values = {k: float(v) for k, v in metrics.items() if _finite(v)}
        if self.kind == "train":
            self.runs[None].log_metrics(values, step=step)
            return
        for source, row in _by_source(values).items():
            self._open(source).update_summary({**row, "step": step})

    def log_traces(self, traces: list[dict[str, Any]], step: int | None) -> None:
        if not self.config.log_traces or not traces:
            return
        if self.kind == "train":
            self.runs[None].log_traces([episode_record(t, step) for t in traces])
            return
        by_source: dict[str, list[dict[str, Any]]] = {}
        for trace in traces:
            by_source.setdefault(str(trace.get("env") or "default"), []).append(episode_record(trace, step))
        for source, records in by_source.items():
            self._open(source).log_traces(records)

    def log_plan(self, plan: dict[str, int], step: int | None) -> None:
        for source, total in plan.items():
            if self.kind == "eval":
                self._open(source).update_summary({"planned_rollouts": total})

    def close(self) -> None:
        runs, self.runs = self.runs, {}
        for source, run in runs.items():
            try:
                run.finish()
                status = run.status.value
            except Exception as exc:  # noqa: BLE001 - closing must reach every run
                log.warning("prime: finishing run %s failed: %s: %s", run.id, type(exc).__name__, exc)
                status = "failed"
            runfile.record(self.dir, self._entry(source, run, status))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _by_source(values: dict[str, float]) -> dict[str, dict[str, float]]:
    """``eval/<source>/<name>`` metrics grouped by source, as ``{source: {name: value}}``."""
    out: dict[str, dict[str, float]] = {}
    for key, value in values.items():
        parts = key.split("/", 2)
        if len(parts) == 3 and parts[0] == "eval":
            out.setdefault(parts[1], {})[parts[2]] = value
    return out


def episode_record(trace: dict[str, Any], step: int | None) -> dict[str, Any]:
    """One prl episode (a :class:`prl.types.Trace` dict) as the JSON mapping prime-runs
    streams to Prime Traces: identity, outcome and messages; token arrays stay local."""
    branches = trace.get("branches") or []
    return {
        "id": trace.get("trace_id"),
        "kind": trace.get("kind", "train"),
        "env": trace.get("env"),
        "task_id": trace.get("task_id"),
        "group": trace.get("group"),
        "step": step,
        "policy_version": trace.get("policy_version"),
        "reward": trace.get("reward"),
        "metrics": {k: v for k, v in (trace.get("metrics") or {}).items() if _finite(v)},
        "stop_condition": trace.get("stop_condition"),
        "error": trace.get("error"),
        "turns": trace.get("turns"),
        "tokens": sum(len(b.get("token_ids") or []) for b in branches),
        "messages": trace.get("messages") or [],
    }
