"""Weight transport contract: trainer publishes versions, the consumer picks them up."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from prl.config.base import PluginConfigBase


class WeightTransportConfig(PluginConfigBase):
    """Base of ``[weight_broadcast]`` variants."""


class WeightTransport(ABC):
    """Moves weights from the trainer to inference servers, one version at a time."""

    type: ClassVar[str]
    Config: ClassVar[type[WeightTransportConfig]] = WeightTransportConfig

    def __init__(self, config: WeightTransportConfig, run_dir: Path) -> None:
        self.config = config
        self.run_dir = Path(run_dir)

    @abstractmethod
    def publish(self, state_dict: dict[str, Any], version: int) -> None:
        """Trainer side: make ``state_dict`` available as ``version`` (blocks until done)."""

    @abstractmethod
    def receive(self, version: int, timeout: float) -> str | None:
        """Consumer side: wait for ``version``; return the ``weight_dir`` to pass to
        ``/update_weights`` (None when the weights travel in-band). Raises TimeoutError."""

    def latest_version(self) -> int | None:
        """Newest fully published version, or None."""
        return None
