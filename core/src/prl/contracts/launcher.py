"""Launcher contract: start, supervise and stop the processes of a run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from prl.config.base import PluginConfigBase, PrlModel
from prl.contracts.base import Plugin


class LauncherConfig(PluginConfigBase):
    """Base of ``[deployment]`` variants."""

    submits: ClassVar[bool] = False
    """True for a launcher that hands the run to a batch scheduler: then ``--dry-run`` builds
    the process plan and calls :meth:`Launcher.dry_run` (which writes the job scripts), and
    ``prl sft`` gives it the trainer as a process instead of training in its own process."""

    def build(self, *, run_dir: Path, root: Any = None) -> Launcher:
        """The launcher this config selects, for the run at ``run_dir``; ``root`` is the
        command's resolved root config (RLConfig, SFTConfig), for run-wide settings such
        as the launcher's own section (:attr:`Launcher.SectionConfig`)."""
        return super().build(run_dir=run_dir, root=root)

    def gpu_ids(self) -> set[int]:
        """GPU ids (0-based, among this machine's visible devices) the launcher places the
        run's processes on when it runs them here; ``prl rl``/``prl sft`` check that this
        machine has them (:mod:`prl.gpus`). Default: none (the processes pick devices)."""
        return set()


@dataclass
class ProcessSpec:
    """One child process of a run: what to start, where its output goes, and how the
    launcher knows it is up.

    ``role`` says what the process is (``inference``, ``orchestrator``, ``trainer``, ...):
    launchers place it by role (GPUs, nodes). A ``service`` (inference, env server) must be
    ready before the other processes start; the launcher waits for its ``ready_file`` to hold
    a URL and/or ``health_url`` (a base URL whose ``/health`` answers 200), and a service that
    exits at all ends the run. The run succeeds when every non-service process exits 0.
    """

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    ready_file: Path | None = None
    service: bool = False
    health_url: str | None = None
    role: str = ""

    def __post_init__(self) -> None:
        self.role = self.role or self.name


class Launcher(Plugin, ABC):
    """Runs a list of processes as one run; a dry run only writes what it would start."""

    type: ClassVar[str]
    Config: ClassVar[type[LauncherConfig]] = LauncherConfig
    SectionConfig: ClassVar[type[PrlModel] | None] = None
    """The settings of this launcher's own section, which the spec names after its ``type``
    at the top level of a run's config and under ``[inference]`` (a server run as a job of
    its own); None for a launcher without one. Core composes this class in through the
    registry (:mod:`prl.config.launcher_sections`) and reads none of its fields; setting the
    section selects this launcher, and the launcher reads it from ``root``."""
    reference_types: ClassVar[tuple[str, ...]] = ()
    """The reference's ``[deployment] type`` spellings (``single_node``, ``multi_node``)
    this launcher stands for when no launcher section picks another."""

    def __init__(self, config: LauncherConfig, run_dir: Path, root: Any = None) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.root = root

    @abstractmethod
    def launch(self, processes: list[ProcessSpec]) -> int:
        """Start every process, supervise until done; return the exit code of the run."""

    def dry_run(self, processes: list[ProcessSpec]) -> None:
        """Write what would be started (scripts for batch schedulers) and start nothing."""
