"""The SLURM launcher's settings: ``[deployment]`` with ``type = "slurm"`` and its own section
``[slurm]`` (also ``inference.slurm``). Their own module, so the job script
(:mod:`prl_launcher_slurm.script`) reads them without importing the launcher that renders it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from prl.config.base import PrlModel
from prl.contracts.launcher import LauncherConfig


class SlurmConfig(PrlModel):
    """SLURM submission settings (``--slurm`` turns them on with these defaults)."""

    job_name: str | None = None
    """Job name (--job-name); None uses the run name."""
    partition: str | None = None
    """Partition (--partition)."""
    account: str | None = None
    """Account (--account)."""
    qos: str | None = None
    """Quality of service (--qos)."""
    time: str = "24:00:00"
    """Wall-clock limit (--time)."""
    gpus_per_node: Annotated[int, Field(ge=0)] | None = None
    """GPUs to request per node (--gpus-per-node); None requests none (a CPU job) unless
    [deployment] gpus_per_node is set."""
    cpus_per_task: Annotated[int, Field(ge=1)] | None = None
    """CPUs per node task (--cpus-per-task)."""
    mem: str | None = None
    """Memory per node (--mem), e.g. "64G"; "0" asks for all of it."""
    extra_directives: list[str] = []
    """Extra #SBATCH lines, written as given after "#SBATCH ", e.g. "--exclusive"."""
    setup: list[str] = []
    """Shell lines run before prl in the job (module loads, venv activation)."""
    template: Path | None = None
    """A Jinja2 sbatch template replacing the built-in one (docs/slurm.md lists its variables)."""
    detach: bool = False
    """Return once the job is submitted instead of waiting for it and streaming its status."""


class SlurmSettings(LauncherConfig):
    """``[deployment]`` of the SLURM launcher (``SlurmLauncher.Config``)."""

    submits: ClassVar[bool] = True

    type: Literal["slurm"] = "slurm"
    """Selects this launcher."""
    gpus_per_node: Annotated[int, Field(ge=0)] = 0
    """GPUs on each node (0: CPU only); requested with --gpus-per-node unless [slurm] says otherwise."""
    num_infer_gpus: Annotated[int, Field(ge=0)] = 0
    """Single node: GPUs given to inference (CUDA_VISIBLE_DEVICES 0..n-1)."""
    num_train_gpus: Annotated[int, Field(ge=0)] = 0
    """Single node: GPUs given to the trainer (the ones after inference's)."""
    num_train_nodes: Annotated[int, Field(ge=0)] = 0
    """Multi-node: nodes running the trainer under torchrun (0: a single-node job)."""
    num_infer_nodes: Annotated[int, Field(ge=0)] = 0
    """Multi-node: nodes serving inference; the first also runs the orchestrator."""
    rdzv_port: Annotated[int, Field(ge=1, le=65535)] = 29400
    """Multi-node: port of torchrun's c10d rendezvous on the first trainer node."""
    startup_timeout: Annotated[float, Field(gt=0)] = 600.0
    """Seconds each node waits for its servers (inference) to become ready."""
    stop_timeout: Annotated[float, Field(gt=0)] = 30.0
    """Seconds a process gets to exit after SIGTERM before it is killed."""

    @model_validator(mode="after")
    def _fits(self):
        if self.num_infer_nodes and not self.num_train_nodes:
            raise ValueError(
                f"num_infer_nodes ({self.num_infer_nodes}) needs num_train_nodes >= 1 (a multi-node job); "
                "leave both 0 for a single-node job"
            )
        if not self.num_train_nodes and self.num_train_gpus + self.num_infer_gpus > self.gpus_per_node:
            raise ValueError(
                f"num_train_gpus ({self.num_train_gpus}) + num_infer_gpus ({self.num_infer_gpus}) "
                f"exceeds gpus_per_node ({self.gpus_per_node})"
            )
        return self

    @property
    def nodes(self) -> int:
        """Nodes the job reserves."""
        return self.num_infer_nodes + self.num_train_nodes if self.num_train_nodes else 1
