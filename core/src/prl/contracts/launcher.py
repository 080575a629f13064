"""Launcher contract: start, supervise and stop the processes of a run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from prl.config.base import PluginConfigBase


class LauncherConfig(PluginConfigBase):
    """Base of ``[deployment]`` variants."""


@dataclass
class ProcessSpec:
    """One child process: argv, environment additions and its log file."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    ready_file: Path | None = None
    # A service (inference, env server) must come up before the workers start; the launcher
    # waits for its ready_file and/or health_url and says what it waits for.
    service: bool = False
    health_url: str | None = None


class Launcher(ABC):
    """Runs a list of processes as one run; a dry run only writes what it would start."""

    type: ClassVar[str]
    Config: ClassVar[type[LauncherConfig]] = LauncherConfig

    def __init__(self, config: LauncherConfig, run_dir: Path) -> None:
        self.config = config
        self.run_dir = Path(run_dir)

    @abstractmethod
    def launch(self, processes: list[ProcessSpec]) -> int:
        """Start every process, supervise until done; return the exit code of the run."""

    def dry_run(self, processes: list[ProcessSpec]) -> None:
        """Write what would be started (scripts for batch schedulers) and start nothing."""
