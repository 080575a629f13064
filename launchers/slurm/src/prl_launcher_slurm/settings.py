"""The SLURM launcher's settings: ``[deployment]`` with ``type = "slurm"``. Its own module,
so the job script (:mod:`prl_launcher_slurm.script`) reads them without importing the
launcher that renders it."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from prl.contracts.launcher import LauncherConfig


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
