"""Stopping child processes: SIGTERM, a grace period, then SIGKILL for what is left.

One home for the shutdown of children, used by the local launcher (each component in its
own process group) and by ``prl inference`` with several engines (plain child processes).
A process is anything with ``poll``, ``send_signal`` and ``wait`` as
:class:`subprocess.Popen` has them; the launcher's children send their signals to the whole
group.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class Stoppable(Protocol):
    """What :func:`stop_processes` needs of a process (:class:`subprocess.Popen` fits)."""

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` (nothing once it has exited)."""

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the exit; raise :class:`subprocess.TimeoutExpired` after ``timeout``."""


P = TypeVar("P", bound=Stoppable)


def stop_processes(procs: Sequence[P], grace: float, on_kill: Callable[[P], None] | None = None) -> None:
    """SIGTERM every running process, the last started first (a server outlives its users),
    wait up to ``grace`` seconds for all of them together, then SIGKILL each one still
    running, calling ``on_kill`` with it first, and reap it (5 s at most)."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    for proc in procs:
        if proc.poll() is None:
            if on_kill is not None:
                on_kill(proc)
            proc.send_signal(signal.SIGKILL)
            proc.wait(5)
