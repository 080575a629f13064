"""Weight transport contract: trainer publishes versions, the consumer picks them up.

How an inference server then loads each version (a directory through ``/update_weights``, or
in-band through :mod:`prl.contracts.broadcast`) is in ``docs/plugin-contracts.md``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import Field

from prl.config.base import PluginConfigBase
from prl.contracts.base import Plugin

if TYPE_CHECKING:  # the trainer publishes torch tensors; core never imports torch
    from torch import Tensor


class WeightTransportConfig(PluginConfigBase):
    """Base of ``[weight_broadcast]`` variants."""

    carries_adapters: ClassVar[bool] = False
    """Whether the transport can hand over LoRA adapters (:meth:`WeightTransport.publish_adapter`);
    a LoRA run with a transport that cannot is refused at config time."""

    timeout: Annotated[float, Field(gt=0)] = 1200.0
    """Seconds either side waits in the handshake before failing (the trainer also waits
    this long for a batch)."""

    def build(self, *, run_dir: Path) -> WeightTransport:
        """The transport this config selects, for the run at ``run_dir``."""
        return super().build(run_dir=run_dir)

    def bind_run(self, inference_workers: int) -> None:
        """Called once by ``prl rl`` / ``prl sft`` before the child configs are written, with
        the number of inference workers (engine processes) the run starts: a transport that
        forms a group with them fills in its sizes and picks free ports here, so every
        component reads the same values. Default: nothing to do."""


class WeightTransport(Plugin, ABC):
    """Moves weights from the trainer to inference servers, one version at a time."""

    type: ClassVar[str]
    Config: ClassVar[type[WeightTransportConfig]] = WeightTransportConfig
    device_tensors: ClassVar[bool] = False
    """True when ``publish`` wants the weights where the trainer holds them (an in-band GPU
    transport); False gets detached CPU tensors."""

    def __init__(self, config: WeightTransportConfig, run_dir: Path) -> None:
        self.config = config
        self.run_dir = Path(run_dir)

    @abstractmethod
    def publish(self, state_dict: dict[str, Tensor], version: int) -> None:
        """Trainer side, main rank: make ``state_dict`` (Hugging Face parameter names) available
        as ``version`` and return once done (it may wait for the consumer's acknowledgement).
        The trainer publishes ``start - 1`` at start, then every step, the last included."""

    def publish_adapter(self, tensors: dict[str, Tensor], adapter_config: dict[str, Any], version: int) -> None:
        """Trainer side, LoRA runs: make the adapter (PEFT tensor names and
        ``adapter_config.json`` contents) available as ``version``; ``receive`` then returns
        a directory the consumer passes to ``/load_lora_adapter``. Only transports whose
        config sets ``carries_adapters`` implement it."""
        raise NotImplementedError(f"weight transport '{self.type}' cannot carry LoRA adapters")

    @abstractmethod
    def receive(self, version: int, timeout: float, load: bool = True) -> str | None:
        """Consumer side: wait for ``version``; return the ``weight_dir`` to pass to
        ``/update_weights`` (None when the weights travel in-band). Raises TimeoutError.

        The orchestrator polls: it calls again with a short ``timeout`` (about a second)
        after each TimeoutError, so a repeated call for one version must be safe, and the
        directory must be complete when it is returned.

        ``load`` is False when the consumer already serves ``version`` and only acknowledges
        it (a fresh run's version 0): an in-band transport then must not send the weights,
        since no ``/update_weights`` call will take them."""

    async def connect(self, client: Any) -> None:
        """Consumer side, once before the first ``receive``: open the channel to the
        inference server(s) behind ``client`` (an in-band transport calls their
        ``/init_broadcaster`` route). Default: nothing to open."""

    def latest_version(self) -> int | None:
        """Newest fully published version, or None."""
        return None
