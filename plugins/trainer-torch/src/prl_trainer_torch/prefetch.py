"""Background tokenisation and packing for SFT (``data.num_workers``).

* ``0``: rows are rendered and packed inline, between training steps.
* ``1``: one background thread renders and packs ahead of the trainer, a bounded number
  of rows at a time. Rendering is Python and holds the GIL, but the training step spends
  most of its time in torch kernels that release it, so the two overlap.
* ``N > 1``: N worker processes render the epoch's samples in parallel, worker ``w``
  taking positions ``w, w + N, w + 2N, ...`` of the epoch order; a background thread takes
  their results back in position order and packs them. The stream is therefore identical
  for every N, which keeps the data cursor (and resume) independent of ``num_workers``.

A worker's error (a bad row) is raised in the trainer with the worker's one-line message.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prl.config.errors import DataError

_DONE = ("done", None)


def ahead(make: Callable[[], Iterator[Any]], depth: int) -> Iterator[Any]:
    """Items of ``make()``, produced by a daemon thread at most ``depth`` items early."""
    q: queue.Queue = queue.Queue(maxsize=max(depth, 1))
    stop = threading.Event()

    def run() -> None:
        it = None
        try:
            it = make()  # inside the try: a producer that fails at start must reach the consumer
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            q.put(("error", exc))
        finally:
            getattr(it, "close", lambda: None)()  # stops worker processes early

    thread = threading.Thread(target=run, name="prl-data", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "done":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join(timeout=10)


def _render_shard(make_source: Callable, source_args: tuple, epoch: int, worker: int, workers: int, out, stop) -> None:
    """Worker process: render this shard's positions of the epoch order, in order, until
    done or told to stop (a clean exit, so no queue is left half-written)."""

    def send(message) -> bool:
        while not stop.is_set():
            try:
                out.put(message, timeout=0.2)
                return True
            except queue.Full:
                continue
        # Told to stop: the trainer reads nothing more, so the rows still buffered for the
        # pipe are dropped; flushing them would block this process's exit on a full pipe
        # until the trainer gives up waiting and terminates it.
        out.cancel_join_thread()
        return False

    try:
        source = make_source(*source_args)
        for position, sample in source.epoch_positions(epoch, worker, workers):
            if not send(("item", (position, sample))):
                return
        send(_DONE)
    except Exception as exc:  # noqa: BLE001 - the message travels to the trainer
        send(("error", str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"))


def _next_message(q, proc, worker: int, poll: float = 1.0) -> tuple[str, Any]:
    """The next message of ``worker``; a worker that died without saying so (killed by the
    OOM killer, a crash while unpickling its source) is an error, not a wait forever."""
    while True:
        try:
            return q.get(timeout=poll)
        except queue.Empty:
            if proc.is_alive():
                continue
        try:  # everything it sent is in the pipe once it has exited
            return q.get(timeout=poll)
        except queue.Empty:
            raise DataError(f"data worker {worker} exited (code {proc.exitcode}) before finishing its rows") from None


def parallel_samples(
    make_source: Callable, source_args: tuple, epoch: int, workers: int, depth: int = 512
) -> Iterator[Any]:
    """The epoch's samples (``None`` for skipped rows dropped), rendered by ``workers``
    processes and returned in epoch order. Each process builds its own source as
    ``make_source(*source_args)`` (a module-level callable: it travels to a spawned process
    by name) and renders its share of ``source.epoch_positions``."""
    ctx = mp.get_context("spawn")  # fork is unsafe once torch has started its threads
    queues = [ctx.Queue(maxsize=depth) for _ in range(workers)]
    stop = ctx.Event()
    procs = [
        ctx.Process(
            target=_render_shard,
            args=(make_source, source_args, epoch, w, workers, queues[w], stop),
            daemon=True,
            name=f"prl-data-{w}",
        )
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    finished = [False] * workers
    try:
        position = 0
        while not all(finished):
            w = position % workers
            if finished[w]:
                position += 1
                continue
            kind, value = _next_message(queues[w], procs[w], w)
            if kind == "done":
                finished[w] = True
            elif kind == "error":
                raise DataError(value)
            else:
                position = value[0] + 1
                if value[1] is not None:
                    yield value[1]
    finally:
        stop.set()
        for p, q in zip(procs, queues, strict=True):
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            q.close()
