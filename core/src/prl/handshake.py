"""The four-stage weight handshake's marker files, shared by the weight transports.

For version ``v`` the trainer and the consumer (orchestrator or online eval) meet in
``<run>/broadcasts/step_v``: the trainer writes ``.sender_ready``, the consumer answers
``.receiver_ready``, the trainer writes ``.started`` and, once the weights are in place or
sent, ``.finished``. Files rather than sockets because every process of a run already
shares its run directory, and the markers survive to show where a stalled handshake stopped.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from prl import layout

SENDER, RECEIVER, STARTED, FINISHED = ".sender_ready", ".receiver_ready", ".started", ".finished"


def touch(path: Path, content: str = "") -> None:
    """Write a marker (its content: a timestamp, then ``content`` if any). Atomic: a peer
    that sees the marker also sees its content."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        fh.write(f"{time.time():.3f}\n{content}")
    os.replace(tmp, path)


def wait(path: Path, timeout: float, what: str) -> None:
    """Wait for ``path`` to exist; TimeoutError naming ``what`` and the path."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while not path.exists():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"waited {timeout:g}s for {what} ({path})")
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


def latest_finished(base: Path) -> int | None:
    """The newest version under ``base`` whose handshake reached ``.finished``, or None."""
    done = [s for s in steps(base) if (layout.step_dir(base, s) / FINISHED).exists()]
    return done[-1] if done else None


def steps(base: Path) -> list[int]:
    """The versions with a ``step_N`` directory under ``base``, ascending."""
    if not base.is_dir():
        return []
    return sorted(n for p in base.iterdir() if (n := layout.parse_step(p.name)) is not None)
