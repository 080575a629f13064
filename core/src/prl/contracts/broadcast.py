"""The inference side of an in-band weight transport: what a backend's ``/init_broadcaster``
and ``/update_weights {"weight_dir": null}`` routes call.

A transport that sends weights over a process group instead of files (``nccl``) publishes
from the trainer with :meth:`prl.contracts.transport.WeightTransport.publish` and gives each
inference worker a :class:`BroadcastJoin` through its class method ``broadcast_join()``.
A backend never imports the transport's modules; it asks core:

    joiner = broadcast_join()                      # the in-band transport installed here
    joiner.start(host, port, rank, world, timeout, backend)   # returns at once
    ... poll joiner.done() (bounded by the server's admin timeout) ...
    version = joiner.group().receive(sink, check)  # one version; sink gets (name, tensor) pairs

Failures are :class:`BroadcastError`: one line naming the stage and the peers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from prl.config.errors import RunError

if TYPE_CHECKING:  # core never imports torch
    from torch import Tensor

Entry = tuple[str, str, list[int]]
"""One tensor of a version's manifest: name, dtype name, shape."""


class BroadcastError(RunError):
    """A weight broadcast failed (joining the group, or a version on the wire)."""


class BroadcastReceiver(Protocol):
    def receive(
        self, sink: Callable[[list[tuple[str, Tensor]]], None], check: Callable[[list[Entry]], str | None] | None = None
    ) -> int:
        """Receive one version: ``check(manifest)`` first (a reason refuses it before any
        tensor arrives, and the rest is drained so the trainer is not left hanging), then
        ``sink`` gets the tensors bucket by bucket. Returns the version number."""
        ...


class BroadcastJoin(Protocol):
    def start(self, host: str, port: int, rank: int, world: int, timeout: float, backend: str) -> None:
        """Start joining the trainer's group at ``host:port`` as ``rank`` of ``world`` in the
        background (the trainer forms the group when it publishes its first version)."""
        ...

    def done(self) -> bool:
        """Whether the join has finished, joined or failed (servers poll this, so their
        wait stays bounded and stops on shutdown)."""
        ...

    def group(self, timeout: float | None = None) -> BroadcastReceiver:
        """The joined group; BroadcastError when the join failed or has not finished."""
        ...


def broadcast_join(transport: str | None = None) -> BroadcastJoin:
    """A fresh :class:`BroadcastJoin` of the in-band weight transport ``transport`` (its tag),
    by default the one installed here (a run has one weight transport, and ``/init_broadcaster``
    is only ever called by an in-band one). LookupError (one line) when there is none, or
    when ``transport`` is not installed here or sends files instead."""
    from prl.plugins import get_registry

    found = {tag: cls for tag, cls in get_registry().classes("weight_transports").items() if _in_band(cls)}
    if transport is None and len(found) == 1:
        return next(iter(found.values())).broadcast_join()
    if transport in found:
        return found[transport].broadcast_join()
    if transport is None:
        named = ", ".join(sorted(found)) or "none"
        raise LookupError(f"needs exactly one in-band weight transport installed where inference runs (found: {named})")
    raise LookupError(f"weight transport '{transport}' is not installed where inference runs, or sends files")


def _in_band(cls: Any) -> bool:
    return callable(getattr(cls, "broadcast_join", None))
