"""Monitor contract: where metrics and traces go."""

from __future__ import annotations

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
    Config: ClassVar[type[MonitorConfig]] = MonitorConfig

    def __init__(self, config: MonitorConfig, run_dir: Path, producer: str, run_name: str = "") -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.producer = producer
        self.run_name = run_name

    @abstractmethod
    def log(self, metrics: dict[str, float], step: int | None) -> None:
        """Record one row of metrics for ``step`` (None for rows keyed by time)."""

    def log_traces(self, traces: list[dict[str, Any]], step: int | None) -> None:
        """Record finished episodes (dicts from :class:`prl.types.Trace`)."""

    def log_plan(self, plan: dict[str, int], step: int | None) -> None:
        """Record how many rollouts each source will produce at ``step`` (``prl eval`` calls
        this once it knows its tasks), so a viewer can show progress against the total."""

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
