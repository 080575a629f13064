"""ZMQ rollout transport: the orchestrator serves batches on one TCP socket, no shared disk.

The trainer pulls: rank ``r`` sends ``{"step": S, "rank": r}`` and waits for the reply, the
same msgpack payload the filesystem transport writes (``{"format", "step", "rank",
"micro_batches"}``). Pulling rather than pushing is what makes restarts safe:

* a request for a step not built yet is remembered and answered when the step ships;
* a rank that gets no answer asks again every ``RETRY_S`` (ZMQ reconnects by itself after an
  orchestrator restart, but a request sent to the old process is lost), so duplicate
  answers can arrive; the receiver drops any whose step is not the one it waits for;
* the orchestrator keeps the last ``KEEP_STEPS`` steps, so a trainer that restarts from a
  checkpoint can fetch a step again.

One thread owns the orchestrator's ROUTER socket (ZMQ sockets are not thread-safe); the
orchestrator hands it payloads through a lock-protected dict.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import msgpack
import zmq

from prl.orchestrator.transport import FORMAT

RETRY_S = 1.0
KEEP_STEPS = 4
POLL_MS = 50
BIND_RETRY_S = 2.0
LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def endpoint(host: str, port: int, *, bind: bool) -> str:
    """The ZMQ address: the orchestrator binds loopback for a loopback host and every
    interface otherwise (trainer ranks on other nodes connect to ``host``)."""
    if bind:
        return f"tcp://{'127.0.0.1' if host in LOOPBACK else '*'}:{port}"
    return f"tcp://{'127.0.0.1' if host == 'localhost' else host}:{port}"


class ZmqBatchSender:
    """Orchestrator side: ``send(step, ranks)`` makes step ``step`` available to the ranks."""

    def __init__(self, host: str, port: int, hwm: int) -> None:
        self._ctx = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.SNDHWM, hwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._bind(host, port)
        self._lock = threading.Lock()
        self._steps: dict[int, list[bytes]] = {}
        self._waiting: dict[tuple[bytes, int, int], None] = {}  # (peer, step, rank), ordered
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="zmq-batches", daemon=True)
        self._thread.start()

    def _bind(self, host: str, port: int) -> None:
        # A socket closed a moment ago (a restarted orchestrator) can hold the port briefly:
        # ZMQ closes sockets in its I/O thread, after close() returns.
        deadline = time.monotonic() + BIND_RETRY_S
        while True:
            try:
                self._sock.bind(endpoint(host, port, bind=True))
                return
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EADDRINUSE or time.monotonic() >= deadline:
                    self._sock.close()
                    raise OSError(f"rollout_transport.port {port}: cannot listen on {host} ({exc})") from None
                time.sleep(0.05)

    def send(self, step: int, ranks: list[list[dict[str, Any]]]) -> None:
        payloads = [
            msgpack.packb({"format": FORMAT, "step": step, "rank": r, "micro_batches": mbs}, use_single_float=True)
            for r, mbs in enumerate(ranks)
        ]
        with self._lock:
            self._steps[step] = payloads
            for old in [s for s in self._steps if s <= step - KEEP_STEPS]:
                del self._steps[old]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            if poller.poll(POLL_MS):
                self._take_requests()
            self._answer()

    def _take_requests(self) -> None:
        while True:
            try:
                peer, body = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                request = msgpack.unpackb(body)
                key = (peer, int(request["step"]), int(request["rank"]))
            except (ValueError, KeyError, TypeError, msgpack.ExtraData):
                continue  # not one of ours; the rank will ask again
            self._waiting[key] = None

    def _answer(self) -> None:
        with self._lock:
            ready = [(k, self._steps[k[1]][k[2]]) for k in self._waiting if k[1] in self._steps]
            ready = [(k, p) for k, p in ready if k[2] < len(self._steps[k[1]])]
        for key, payload in ready:
            del self._waiting[key]
            try:
                self._sock.send_multipart([key[0], payload], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # peer gone or over its high-water mark: it asks again


class ZmqBatchReceiver:
    """Trainer side: ``receive(step, timeout)`` returns this rank's micro-batches of ``step``."""

    def __init__(self, host: str, port: int, rank: int) -> None:
        self.rank = rank
        self.address = endpoint(host, port, bind=False)
        self._sock = zmq.Context.instance().socket(zmq.DEALER)
        self._sock.setsockopt(zmq.IDENTITY, f"rank-{rank}-{os.getpid()}".encode())
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(self.address)

    def receive(self, step: int, timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        request = msgpack.packb({"step": step, "rank": self.rank})
        asked_at = 0.0
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError(
                    f"waited {timeout:g}s for batch step {step} rank {self.rank} from the orchestrator at "
                    f"{self.address} (rollout_transport zmq); is the orchestrator running and producing rollouts?"
                )
            if now - asked_at >= RETRY_S:
                self._sock.send(request)
                asked_at = now
            if not self._sock.poll(int(min(RETRY_S, deadline - now) * 1000) or 1):
                continue
            payload = msgpack.unpackb(self._sock.recv(), strict_map_key=False)
            if payload.get("step") == step and payload.get("rank") == self.rank:
                if payload.get("format") != FORMAT:
                    raise ValueError(f"{self.address}: unexpected batch format {payload.get('format')!r}")
                return payload["micro_batches"]

    def close(self) -> None:
        self._sock.close()
