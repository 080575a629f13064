"""Launcher contract: start, supervise and stop the processes of a run (``docs/plugin-contracts.md``)."""

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
    """The process's name in messages and in ``processes.jsonl`` (``inference``, ``trainer``)."""
    argv: list[str]
    """The command line, starting with the Python interpreter."""
    log_path: Path
    """Where its stdout and stderr go (appended), under ``logs/attempt_N/``."""
    env: dict[str, str] = field(default_factory=dict)
    """Additions over the launcher's own environment (``PRL_*`` run identity, the config's
    ``env_vars``, ``PRL_READY_FILE`` for a server)."""
    ready_file: Path | None = None
    """A service writes its base URL here once it serves; a stale file must be removed
    before the process starts."""
    service: bool = False
    """A server the others need: started first and waited for, stopped at the end; its
    exit ends the run."""
    health_url: str | None = None
    """A base URL whose ``/health`` answers 200 once the service is ready; None when the
    port is only known once it runs (then the ready file says)."""
    role: str = ""
    """What the process is, for placement (``inference``, ``orchestrator``, ``trainer``);
    defaults to ``name``."""

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
        """Start every process, supervise until done; return the exit code of the run.

        Services first, each waited for until ready; then the others, all at once (``prl
        rl`` runs orchestrator and trainer together). The first process to exit non-zero,
        or a service exiting at all, ends the run with that code (1 for a service that
        exited 0; 2 is a usage error the process already said in one line); every
        non-service process exiting 0 is success. Whatever still runs is stopped before
        returning. Recording each process with :func:`prl.procinfo.record` lets the stall
        watchdog and the end-of-run summary name it.
        """

    def dry_run(self, processes: list[ProcessSpec]) -> None:
        """Write what would be started (scripts for batch schedulers) and start nothing;
        ``--dry-run`` calls it when the config sets ``submits``."""
