"""Open either end of the rollout transport a config names (``rollout_transport.type``):
the filesystem one in :mod:`prl.orchestrator.transport`, or zmq in
:mod:`prl.orchestrator.transport_zmq` (imported only when chosen)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from prl.orchestrator.transport import FilesystemBatchReceiver, FilesystemBatchSender

if TYPE_CHECKING:  # annotations only
    from prl.config.sections import RolloutTransportConfig


def open_sender(config: RolloutTransportConfig, run_dir: Path):
    """The orchestrator's end of ``config`` (a RolloutTransportConfig): ``send(step, ranks)``."""
    if config.type == "zmq":
        from prl.orchestrator.transport_zmq import ZmqBatchSender

        return ZmqBatchSender(config.host, config.port, config.hwm)
    return FilesystemBatchSender(run_dir)


def open_receiver(config: RolloutTransportConfig, run_dir: Path, rank: int):
    """Trainer rank ``rank``'s end of ``config``: ``receive(step, timeout)``."""
    if config.type == "zmq":
        from prl.orchestrator.transport_zmq import ZmqBatchReceiver

        return ZmqBatchReceiver(config.host, config.port, rank)
    return FilesystemBatchReceiver(run_dir, rank)
