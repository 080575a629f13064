"""Follow the trainer's weight versions and load each into the inference server.

The trainer publishes every version ``v`` (its initial weights as ``start - 1``, then one per
step) through the weight transport; the consumer side blocks in ``receive(v, timeout)``
until the version is complete and acknowledges it (the trainer waits for that
acknowledgement). For each version the follower pauses the engines, calls
``/update_weights {weight_dir}``, resumes them and records ``v`` as the policy version.

A version equal to the one inference already serves is only acknowledged (a fresh run's
version 0 is the base model the server loaded at start). A LoRA run loads every version,
0 included, through ``/load_lora_adapter`` under the adapter's name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from prl import layout
from prl.aio import wait_event

log = logging.getLogger(__name__)


async def load_version(client: Any, weight_dir: str | None, version: int, adapter: str | None = None) -> None:
    """Load ``version`` into the inference server: pause the engines, ``/update_weights``
    (a LoRA run: ``/load_lora_adapter`` under the name ``adapter``), resume them (also
    after a failed update, so the server is never left paused)."""
    started = time.monotonic()
    await client.pause()
    try:
        if adapter is not None:
            if weight_dir is None:
                raise RuntimeError("a LoRA adapter needs a weight directory; the weight transport sent none")
            await client.load_lora_adapter(adapter, weight_dir)
        else:
            await client.update_weights(weight_dir, version=version)
    finally:
        await client.resume()
    log.info("inference now serves policy version %d (loaded in %.2fs)", version, time.monotonic() - started)


class WeightFollower:
    """Background task: acknowledge and apply versions ``first, first + 1, ...``."""

    def __init__(
        self,
        transport: Any,
        client: Any,
        first: int,
        loaded: int | None,
        on_update: Callable[[int], None] | None = None,
        poll: float = 1.0,
        adapter: str | None = None,
    ) -> None:
        self.transport = transport
        self.adapter = adapter
        self.client = client
        self.next = first
        self.version: int | None = loaded
        self.on_update = on_update
        self.poll = poll
        self.last: int | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self, last: int | None = None) -> None:
        self.last = last
        self._task = asyncio.create_task(self._run(), name="weight-follower")

    async def _run(self) -> None:
        while self.last is None or self.next <= self.last:
            try:
                load = self.next != self.version
                weight_dir = await asyncio.to_thread(self.transport.receive, self.next, self.poll, load)
            except TimeoutError:
                continue
            if self.next != self.version:
                await self._load(weight_dir, self.next)
            self.version = self.next
            self.next += 1
            if self.on_update is not None:
                self.on_update(self.version)
            self._changed.set()

    async def _load(self, weight_dir: str | None, version: int) -> None:
        await load_version(self.client, weight_dir, version, self.adapter)

    def check(self) -> None:
        """Re-raise a failure of the background task."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            exc = self._task.exception()
            if exc is not None:
                raise exc

    async def wait_for(self, version: int, timeout: float) -> float:
        """Wait until ``version`` (or newer) is loaded; return the seconds waited."""
        started = said = time.monotonic()
        while self.version is None or self.version < version:
            self.check()
            waited = time.monotonic() - started
            if time.monotonic() - said >= 60.0:
                said = time.monotonic()
                log.info(
                    "waiting for the trainer's weights version %d (broadcasts/step_%d) (%.0f s)",
                    version,
                    version,
                    waited,
                )
            if waited >= timeout:
                raise TimeoutError(
                    f"waited {waited:.0f}s for the trainer's weights version {version} "
                    f"(broadcasts/{layout.step_name(version)}); inference serves version {self.version}. "
                    "Is the trainer running?"
                )
            self._changed.clear()
            await wait_event(self._changed, min(1.0, timeout - waited))
        return time.monotonic() - started

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass
