"""Monitor contract: where metrics and traces go."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from prl.config.base import PluginConfigBase


class MonitorConfig(PluginConfigBase):
    """Base of one ``[monitors.<key>]`` section."""


class Monitor(ABC):
    """A metric sink. ``producer`` is ``orch``, ``trainer``, ``eval`` or ``online-eval``."""

    key: ClassVar[str]
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

    def close(self) -> None:
        """Flush and release resources; called on success and error paths."""


def build_monitors(config: Any, run_dir: Path, producer: str) -> list[Monitor]:
    """One monitor per enabled ``[monitors.<key>]`` section of a component's ``config``
    (none when it has no monitors section), writing as ``producer``."""
    from prl.plugins import get_registry

    section = getattr(config, "monitors", None)
    if section is None:
        return []
    run_name = getattr(getattr(config, "run", None), "name", None) or ""
    monitors = []
    for key in type(section).model_fields:
        cfg = getattr(section, key)
        if cfg is not None:
            cls = get_registry().get("monitors", key)
            monitors.append(cls(cfg, run_dir, producer=producer, run_name=run_name))
    return monitors
