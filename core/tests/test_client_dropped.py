"""The inference client sends a request again when the server drops the connection before
answering: what a server does to a kept-alive connection it left idle past its keep-alive
timeout, for example after it was stopped for a while (SIGSTOP) with a request already written.
Found by the watchdog e2e test: inference stopped for two minutes, then POST /pause failed
with ReadError('') and the orchestrator exited."""

from __future__ import annotations

import asyncio
import json

from prl.client import DROPPED_RETRIES, InferenceError, InferenceHTTPClient


class DroppingServer:
    """Answers ``{"version": 3}`` to every request after the first ``drops``, whose
    connections it resets (RST) once the request is read."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.paths: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        length = next(int(x.split(":")[1]) for x in lines if x.lower().startswith("content-length"))
        await reader.readexactly(length)
        self.paths.append(lines[0].split()[1])
        if len(self.paths) <= self.drops:
            writer.transport.abort()
            return
        body = json.dumps({"version": 3}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
        writer.write(b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()


async def _call(drops: int, call):
    server = DroppingServer(drops)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        async with InferenceHTTPClient(f"http://127.0.0.1:{port}") as client:
            try:
                return await call(client), server.paths
            except InferenceError as exc:
                return exc, server.paths
    finally:
        srv.close()
        await srv.wait_closed()


def test_a_dropped_connection_is_sent_again():
    got, paths = asyncio.run(_call(1, lambda c: c.pause()))
    assert got is None and paths == ["/pause", "/pause"]
    got, paths = asyncio.run(_call(DROPPED_RETRIES, lambda c: c.update_weights("/w", version=3)))
    assert got == 3 and paths == ["/update_weights"] * (DROPPED_RETRIES + 1)


def test_retries_are_bounded_and_the_error_names_the_route():
    got, paths = asyncio.run(_call(DROPPED_RETRIES + 1, lambda c: c.resume()))
    assert isinstance(got, InferenceError) and "/resume failed" in str(got)
    assert paths == ["/resume"] * (DROPPED_RETRIES + 1)


def test_joining_a_broadcast_group_is_never_sent_twice():
    got, paths = asyncio.run(_call(1, lambda c: c.init_broadcaster({"host": "h", "port": 1})))
    assert isinstance(got, InferenceError) and paths == ["/init_broadcaster"]
