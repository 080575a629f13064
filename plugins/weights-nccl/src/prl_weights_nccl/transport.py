"""NCCL weight transport: the trainer broadcasts each version to the inference workers.

Control runs through the same four-stage handshake as the filesystem transport
(:mod:`prl.handshake`, markers in ``broadcasts/step_N``, no weight files); the weights
themselves go over a torch.distributed group (:mod:`prl_weights_nccl.group`): NCCL between
GPUs, gloo where a side has no GPU (``backend = "auto"``).

1. The orchestrator (consumer) calls ``/init_broadcaster`` on the inference server once
   (:meth:`NcclWeights.connect`); the server joins the group in the background.
2. The trainer forms the group on its first publish (rank 0, listening on ``host:port``).
3. Per version: the trainer writes ``.sender_ready``; the consumer answers
   ``.receiver_ready`` saying ``load`` or ``skip`` (a version inference already serves,
   such as a fresh run's version 0); on ``load`` the consumer pauses inference and calls
   ``/update_weights {"weight_dir": null}``, which receives in-band, while the trainer
   writes ``.started``, broadcasts, and writes ``.finished``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from prl import layout
from prl.config.errors import ConfigError
from prl.contracts import WeightTransport, WeightTransportConfig
from prl.handshake import FINISHED, RECEIVER, SENDER, STARTED, latest_finished, steps, touch, wait

KEEP = 2


class NcclWeights(WeightTransport):
    """Weights over a broadcast group, control through marker files (module docstring)."""

    type: ClassVar[str] = "nccl"
    device_tensors: ClassVar[bool] = True

    class Config(WeightTransportConfig):
        type: Literal["nccl"] = "nccl"
        """Selects this transport."""
        host: str = "localhost"
        """The trainer's address, where inference workers join the group."""
        port: Annotated[int, Field(ge=0, le=65535)] = 29501
        """The trainer's rendezvous port (0: any free port, picked when the run is launched)."""
        backend: Literal["auto", "nccl", "gloo"] = "auto"
        """Collective backend: auto picks nccl where a GPU is visible, gloo otherwise."""
        bucket_mb: Annotated[int, Field(ge=1)] = 512
        """Tensors of one dtype are packed into flat buffers of at most this many MiB, one
        collective per buffer."""
        inference_world_size: Annotated[int, Field(ge=1)] | None = None
        """Inference workers in the group; filled in by prl rl, not set by hand."""

        def bind_run(self, inference_workers: int) -> None:
            if self.inference_world_size not in (None, inference_workers):
                raise ConfigError(
                    f"--weight-broadcast.inference-world-size: prl rl fills it in ({inference_workers} inference "
                    f"worker(s) in this run), got {self.inference_world_size}; leave it unset"
                )
            self.inference_world_size = inference_workers
            if self.port == 0:
                from prl.serving import free_listen_port

                self.port = free_listen_port(self.host)

    def __init__(self, config: Config, run_dir: Path) -> None:
        super().__init__(config, run_dir)
        self._group = None

    @property
    def base(self) -> Path:
        return self.run_dir / "broadcasts"

    def step_dir(self, version: int) -> Path:
        return layout.step_dir(self.base, version)

    def _world(self) -> int:
        if self.config.inference_world_size is None:
            raise ConfigError(
                "weight_broadcast.inference_world_size is unset: start the run with prl rl, which fills it in"
            )
        return 1 + self.config.inference_world_size

    # ---- trainer side -----------------------------------------------------------------
    def publish(self, state_dict: dict[str, Any], version: int) -> None:
        if self._group is None:
            from prl_weights_nccl.group import join

            cfg = self.config
            self._group = join(cfg.host, cfg.port, 0, self._world(), cfg.timeout, cfg.backend)
        target = self.step_dir(version)
        if target.exists():
            shutil.rmtree(target)  # a previous attempt's markers are not this handshake's
        target.mkdir(parents=True)
        touch(target / SENDER)
        what = f"a consumer to acknowledge weights version {version}; is the orchestrator running?"
        wait(target / RECEIVER, self.config.timeout, what)
        touch(target / STARTED)
        if "skip" not in (target / RECEIVER).read_text():
            self._group.send(state_dict, version, self.config.bucket_mb * 1024**2)
        touch(target / FINISHED)
        self._prune(version)

    def _prune(self, newest: int) -> None:
        for step in steps(self.base)[:-KEEP]:
            if step < newest:
                shutil.rmtree(self.step_dir(step), ignore_errors=True)

    # ---- inference side --------------------------------------------------------------
    @classmethod
    def broadcast_join(cls) -> Any:
        """The inference worker's side (prl.contracts.broadcast.BroadcastJoin): a background
        join of the trainer's group, then one version received per ``/update_weights``."""
        from prl_weights_nccl.group import BackgroundJoin

        return BackgroundJoin()

    # ---- consumer side (torch-free) ---------------------------------------------------
    async def connect(self, client: Any) -> None:
        cfg = self.config
        await client.init_broadcaster(
            {
                "host": cfg.host,
                "port": cfg.port,
                "rank_offset": 1,
                "inference_world_size": self._world() - 1,
                "timeout": cfg.timeout,
                "backend": cfg.backend,
            }
        )

    def receive(self, version: int, timeout: float, load: bool = True) -> str | None:
        target = self.step_dir(version)
        wait(target / SENDER, timeout, f"the trainer to publish weights version {version}")
        touch(target / RECEIVER, "load" if load else "skip")
        return None

    def latest_version(self) -> int | None:
        return latest_finished(self.base)
