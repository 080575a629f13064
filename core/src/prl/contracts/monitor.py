"""Monitor contract: where metrics and traces go."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from prl.config.base import PluginConfigBase
from prl.contracts.base import Plugin


class MonitorConfig(PluginConfigBase):
    """Base of one ``[monitors.<key>]`` section."""

    def build(self, *, run_dir: Path, producer: str, run_name: str = "") -> Monitor:
        """The monitor of this section, writing into ``run_dir`` as ``producer``."""
        return super().build(run_dir=run_dir, producer=producer, run_name=run_name)


class Monitor(Plugin, ABC):
    """A metric sink. ``producer`` is ``orch``, ``trainer``, ``eval`` or ``online-eval``."""

    key: ClassVar[str]
    # A monitor that prints one status line per step to the terminal; when none of a run's
    # monitors does, the orchestrator prints its own line so a run is never silent.
    prints_steps: ClassVar[bool] = False
    # Fields of a monitor that logs one run from trainer and orchestrator together (W&B:
    # ``("project",)``): under ``prl rl`` it must be on for both or neither, with these
    # fields equal. None: each side may use the monitor on its own.
    run_wide: ClassVar[tuple[str, ...] | None] = None
    # The sub-configs of ``prl rl`` a shared ``[monitors.<key>]`` section turns on. A monitor
    # whose platform run belongs to one process (prime: the orchestrator) names only that one.
    rl_components: ClassVar[tuple[str, ...]] = ("trainer", "orchestrator")
    Config: ClassVar[type[MonitorConfig]] = MonitorConfig

    def __init__(self, config: MonitorConfig, run_dir: Path, producer: str, run_name: str = "") -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.producer = producer
        self.run_name = run_name

    @abstractmethod
    def log(self, metrics: dict[str, float], step: int | None) -> None:
        """Record one row of metrics for ``step`` (None for rows keyed by time).

        The orchestrator and the trainer each log one row per step; an exception there
        ends that process, while a time-keyed row that fails only logs a warning."""

    def log_traces(self, traces: list[dict[str, Any]], step: int | None) -> None:
        """Record finished episodes (dicts from :class:`prl.types.Trace`)."""

    def log_annotations(self, records: list[dict[str, Any]], step: int | None) -> None:
        """Record per-token arrays for trace branches, as this monitor's producer. A record is
        ``{"version": 1, "trace_id", "info": {...}, "branches": [{"index": i, "<name>": [per
        token], ...}]}`` (``docs/monitoring.md``); monitors that keep no tokens ignore it."""

    def log_plan(self, plan: dict[str, int], step: int | None) -> None:
        """Record how many rollouts each source will produce at ``step`` (``prl eval`` calls
        this once it knows its tasks), so a viewer can show progress against the total."""

    def log_live(self, trace_id: str, event: dict[str, Any]) -> None:
        """Record one event of an in-flight episode (:mod:`prl.live`). ``event["event"]`` is
        ``dispatch`` (with ``env``, ``task_id``, ``group``, ``kind``, ``version``, ``time``),
        ``start`` (``prompt`` messages), ``turn`` (``agent``, ``turn``, ``text``, ``tokens``,
        ``finish_reason``) or ``end`` (the finished trace follows through ``log_traces``).
        Default: ignored. Errors are logged once by the caller and never fail the episode."""

    def clear_live(self) -> None:
        """Forget in-flight episodes a killed earlier process left behind; the orchestrator
        calls this once at start, before it dispatches. Default: nothing to forget."""

    def close(self) -> None:
        """Flush and release resources; called on success and error paths."""


def build_monitors(config: BaseModel, run_dir: Path, producer: str) -> list[Monitor]:
    """One monitor per enabled ``[monitors.<key>]`` section of a component's ``config``
    (none when it has no monitors section), writing as ``producer``."""
    section = getattr(config, "monitors", None)
    if section is None:
        return []
    run_name = getattr(getattr(config, "run", None), "name", None) or ""
    configs = (getattr(section, key) for key in type(section).model_fields)
    return [cfg.build(run_dir=run_dir, producer=producer, run_name=run_name) for cfg in configs if cfg is not None]


def log_time_keyed(monitors: list[Any], row: dict[str, float], who: str, log: logging.Logger) -> None:
    """Log a ``step: null`` row to every monitor. A monitor that fails gets one warning on
    ``log`` naming ``who`` wrote the row, never an error: a run must outlive its side rows."""
    for monitor in monitors:
        try:
            monitor.log(row, None)
        except Exception as exc:  # noqa: BLE001 - a sink failing must not stop the run
            log.warning("%s: monitor %s could not log: %s", who, type(monitor).__name__, exc)
