"""``prl env-server @ resolved/envs/<split>/<name>.json``: serve one source's rollouts.

The JSON file holds a :class:`prl.config.components.SourceConfig`. The server binds
127.0.0.1 on a port the OS picks, then writes ``host:port`` to ``<name>.address`` next to
the config file (write-then-rename, so a reader never sees a partial address), and serves
until SIGTERM/SIGINT, after which it exits within a few seconds, cancelling the calls in
flight. A taskset with a protocol of its own provides
``serve(host, on_bound)``; any other taskset is served with prl's JSON protocol.

A server that an orchestrator spawned (``$PRL_ENV_SERVER_PARENT`` holds the orchestrator's
pid) also stops when that orchestrator is gone: killed outright (SIGKILL, the OOM killer)
it cannot stop its children, and the launcher signals only the processes it started, so
an orphaned server would live on with its port and memory. A server started by hand has no
parent to watch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

from prl.config.components import SourceConfig
from prl.envs.protocol import ProtocolServer
from prl.envs.source import PARENT_ENV, build_taskset
from prl.fsutil import write_atomic
from prl.logs import setup_logging
from prl.serving import SHUTDOWN_GRACE_S

log = logging.getLogger("prl.env-server")
PARENT_POLL_S = 1.0


def publish_address(address_file: Path, address: str) -> None:
    write_atomic(address_file, address + "\n")


async def serve(source: SourceConfig, address_file: Path, host: str = "127.0.0.1") -> None:
    taskset = build_taskset(source)

    def on_bound(address: str) -> None:
        publish_address(address_file, address)
        log.info("env server for source '%s' (taskset %s) listening on %s", source.name, source.env.taskset.id, address)

    own = getattr(taskset, "serve", None)
    if own is not None:
        await own(host, on_bound)
    else:
        await ProtocolServer(taskset, source.name, source.env.timeout).serve(host, on_bound)


async def watch_parent(parent: int, stop: asyncio.Task, poll_s: float = PARENT_POLL_S) -> None:
    """Cancel ``stop`` once this process's parent is no longer ``parent`` (it died and this
    process was handed to init or a subreaper)."""
    while os.getppid() == parent:
        await asyncio.sleep(poll_s)
    log.warning("env server: the orchestrator that started it (pid %d) is gone; stopping", parent)
    stop.cancel()


def main(config_path: str | Path) -> int:
    path = Path(config_path)
    # Level and format come from the spawning component ($PRL_LOG_LEVEL, $PRL_JSON_LOGGING).
    setup_logging(None)
    source = SourceConfig.model_validate(json.loads(path.read_text()))
    address_file = path.with_suffix(".address")

    loop = asyncio.new_event_loop()
    main_task = loop.create_task(serve(source, address_file))
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Every task, not only serving: an asyncio server's close waits for its open
        # connections (Python 3.12+), so a stop must not wait for clients to hang up.
        loop.add_signal_handler(sig, _cancel_all, loop)
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit():
        loop.create_task(watch_parent(int(parent), main_task))
    try:
        loop.run_until_complete(main_task)
    except asyncio.CancelledError:
        log.info("env server for source '%s' stopped", source.name)
    finally:
        _cancel_the_rest(loop)
        address_file.unlink(missing_ok=True)
        loop.close()
    return 0


def _cancel_all(loop: asyncio.AbstractEventLoop) -> list[asyncio.Task]:
    """Cancel serving and every call in flight (a rollout, a client that never finished its
    request line, the parent watcher)."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    return tasks


def _cancel_the_rest(loop: asyncio.AbstractEventLoop) -> None:
    """What is still running after serving stopped gets SHUTDOWN_GRACE_S to unwind."""
    rest = _cancel_all(loop)
    if rest:
        loop.run_until_complete(asyncio.wait(rest, timeout=SHUTDOWN_GRACE_S))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
