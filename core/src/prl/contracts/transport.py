"""Weight transport contract: trainer publishes versions, the consumer picks them up."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar

from pydantic import Field

from prl.config.base import PluginConfigBase
from prl.contracts.base import Plugin

if TYPE_CHECKING:  # the trainer publishes torch tensors; core never imports torch
    from torch import Tensor


class WeightTransportConfig(PluginConfigBase):
    """Base of ``[weight_broadcast]`` variants."""

    timeout: Annotated[float, Field(gt=0)] = 1200.0
    """Seconds either side waits in the handshake before failing (the trainer also waits
    this long for a batch)."""

    def build(self, *, run_dir: Path) -> WeightTransport:
        """The transport this config selects, for the run at ``run_dir``."""
        return super().build(run_dir=run_dir)


class WeightTransport(Plugin, ABC):
    """Moves weights from the trainer to inference servers, one version at a time."""

    type: ClassVar[str]
    Config: ClassVar[type[WeightTransportConfig]] = WeightTransportConfig

    def __init__(self, config: WeightTransportConfig, run_dir: Path) -> None:
        self.config = config
        self.run_dir = Path(run_dir)

    @abstractmethod
    def publish(self, state_dict: dict[str, Tensor], version: int) -> None:
        """Trainer side: make ``state_dict`` available as ``version`` (blocks until done)."""

    @abstractmethod
    def receive(self, version: int, timeout: float) -> str | None:
        """Consumer side: wait for ``version``; return the ``weight_dir`` to pass to
        ``/update_weights`` (None when the weights travel in-band). Raises TimeoutError."""

    def latest_version(self) -> int | None:
        """Newest fully published version, or None."""
        return None
