"""SLURM launcher: a run becomes one sbatch job, on one node or across several.

``[deployment] type = "slurm"`` (or ``--slurm``, or the reference's ``single_node`` with
``[slurm]`` and ``multi_node``) selects it; ``prl inference --slurm`` uses it to run an
inference server as a job of its own (:mod:`prl_launcher_slurm.server`). The submitting
command renders the job (:mod:`prl_launcher_slurm.script`), submits it with ``sbatch``,
records the job id in the run directory and follows the job until it ends
(:mod:`prl_launcher_slurm.job`), or returns at once with ``[slurm] detach``. Inside the
job every node runs its part of the plan under prl's local supervisor
(:mod:`prl_launcher_slurm.node`).

Layouts:

* single node (``num_train_nodes = 0``): inference, env servers, orchestrator and trainer on
  the one allocated node, GPUs split by ``num_infer_gpus`` / ``num_train_gpus``;
* multi-node: ``num_infer_nodes + num_train_nodes`` nodes; the first ``num_infer_nodes``
  serve inference (with several, one engine each behind prl's router on the first, which
  also runs the orchestrator), the others run the trainer under torchrun with a c10d
  rendezvous across them. Batches and weights go through shared storage (the
  filesystem transports).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import ClassVar

from prl.contracts.launcher import Launcher, ProcessSpec
from prl_launcher_slurm import job as slurm_job
from prl_launcher_slurm.script import (
    Job,
    check_layout,
    entry_of,
    render,
    require_sbatch,
    template_values,
    write_engines,
    write_plan,
)
from prl_launcher_slurm.server import ServerAddress, with_api_key
from prl_launcher_slurm.settings import SlurmConfig, SlurmSettings


class SlurmLauncher(Launcher):
    """Submits the run as one SLURM job and follows it (see the module docstring)."""

    type: ClassVar[str] = "slurm"
    SectionConfig = SlurmConfig  # [slurm] and inference.slurm: set, the run (or server) goes through this launcher
    reference_types: ClassVar[tuple[str, ...]] = ("multi_node",)

    class Config(SlurmSettings):  # the fields live in prl_launcher_slurm.settings (the script reads them too)
        pass

    def dry_run(self, processes: list[ProcessSpec]) -> None:
        """Render the job script and plan into ``<run>/launcher/`` and print the sbatch
        command; nothing is submitted."""
        job = self._render(processes)
        print(f"Wrote {job.script} ({job.nodes} node(s)); submit it with:\n  {' '.join(job.command)}")

    def launch(self, processes: list[ProcessSpec]) -> int:
        """Render, submit and follow the job; its exit code (0 at once with detach)."""
        job = self._render(processes)
        job_id = slurm_job.submit(job.script)
        log_path = job.log_path(job_id)
        self._record(job_id, log_path)
        print(f"prl: submitted SLURM job {job_id} ({job.nodes} node(s)); job log: {log_path}", flush=True)
        # A server job says where clients reach it once it serves (prl_launcher_slurm.server).
        ready = processes[0].ready_file if job.entry == "inference" else None
        if self.root is not None and self.root.slurm is not None and self.root.slurm.detach:
            print(f"prl: detached; follow it with: squeue -j {job_id}; cancel it with: scancel {job_id}")
            if ready is not None:
                print(f"prl: once it serves, {ready} holds the port it listens on")
            return 0
        announce = ServerAddress(job_id, ready, job.script.parent) if ready is not None else None
        return slurm_job.watch(job_id, log_path, announce=announce)

    # ---- internals ----------------------------------------------------------------------
    def _render(self, processes: list[ProcessSpec]) -> Job:
        require_sbatch()
        check_layout(self.config, self.root, processes)
        config_dir, log_dir = _attempt_dirs(processes)
        entry = entry_of(self.root)
        out = self.run_dir / "launcher"
        job = Job(entry, out / f"{entry}.sbatch", out / f"{entry}.plan.json", out / "logs", self.config.nodes)
        slurm = getattr(self.root, "slurm", None)
        # Rendered before anything is written: a template that fails leaves no half a job.
        text = render(
            slurm.template if slurm else None,
            template_values(self.config, self.root, job, config_dir.name.removeprefix("attempt_")),
        )
        job.log_dir.mkdir(parents=True, exist_ok=True)
        if entry == "inference":
            processes = with_api_key(processes, self.root, out)
        engines = write_engines(self.config, self.root, config_dir)
        write_plan(job.plan, self.config, self.root, processes, log_dir, engines)
        job.script.write_text(text)
        job.script.chmod(0o755)
        if entry == "rl" and not self.config.num_train_nodes and self.root is not None:
            # The reference writes the whole resolved run config for single-node SLURM jobs.
            (config_dir / "resolved" / "rl.json").write_text(self.root.model_dump_json(indent=2) + "\n")
        if self.config.num_train_nodes:
            _link_node_logs(log_dir, [p.role for p in processes])
        return job

    def _record(self, job_id: str, log_path: Path) -> None:
        out = self.run_dir / "launcher"
        (out / "job_id").write_text(job_id + "\n")
        attempt = Path(os.environ.get("PRL_ATTEMPT_CONFIG_DIR", "attempt_?")).name
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        with open(out / "jobs.tsv", "a") as fh:
            fh.write(f"{job_id}\t{attempt}\t{stamp}\t{log_path}\n")


def _attempt_dirs(processes: list[ProcessSpec]) -> tuple[Path, Path]:
    """This attempt's config and log directories, as the processes are told them."""
    env = processes[0].env if processes else {}
    config_dir = env.get("PRL_ATTEMPT_CONFIG_DIR") or os.environ.get("PRL_ATTEMPT_CONFIG_DIR")
    log_dir = env.get("PRL_ATTEMPT_LOG_DIR") or os.environ.get("PRL_ATTEMPT_LOG_DIR")
    if not config_dir or not log_dir:
        print("prl: the slurm launcher needs the run's attempt directories (PRL_ATTEMPT_*_DIR)", file=sys.stderr)
        raise SystemExit(1)
    return Path(config_dir), Path(log_dir)


def _link_node_logs(log_dir: Path, roles: list[str]) -> None:
    """``trainer.log`` -> ``trainer/node_0.log`` (and inference's), as relative links."""
    for role in ("trainer", "inference"):
        if role not in roles:
            continue
        (log_dir / role).mkdir(parents=True, exist_ok=True)
        link = log_dir / f"{role}.log"
        if not link.is_symlink() and not link.exists():
            link.symlink_to(Path(role) / "node_0.log")
