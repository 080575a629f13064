"""The data-parallel router (prl.router) against fake engines, over a real socket."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from prl.client import DROPPED_RETRIES
from prl.router import Router
from prl.serving import bind

ENGINES = ["http://e0", "http://e1"]


class FakeEngines:
    """Two engines answering as prl's inference servers do; ``delay`` holds generate calls."""

    def __init__(self, delay: float = 0.0) -> None:
        self.version = {url: 0 for url in ENGINES}
        self.calls: list[tuple[str, str, dict]] = []
        self.delay = delay
        self.down: set[str] = set()
        self.drops: dict[str, int] = {}  # path -> connections still to drop before an answer

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        engine = f"http://{request.url.host}"
        body = json.loads(request.content) if request.content else {}
        self.calls.append((engine, request.url.path, body))
        if engine in self.down:
            raise httpx.ConnectError("refused", request=request)
        if self.drops.get(request.url.path, 0) > 0:
            self.drops[request.url.path] -= 1
            raise httpx.ReadError("connection reset", request=request)
        path = request.url.path
        if path == "/health":
            return httpx.Response(200, json={"status": "ok", "version": self.version[engine], "paused": False})
        if path == "/update_weights":
            if body["weight_dir"] == "bad" and engine == ENGINES[1]:
                return httpx.Response(400, json={"error": {"message": "no weights in bad"}})
            self.version[engine] = body["version"] - (engine == ENGINES[1] and body.get("lag", 0))
            return httpx.Response(200, json={"status": "ok", "version": self.version[engine]})
        if path == "/v1/completions":
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Events(engine))
        await asyncio.sleep(self.delay)
        # A streamed body, as a real transport gives the router.
        data = json.dumps({"engine": engine, "echo": body}).encode()
        return httpx.Response(200, headers={"content-type": "application/json"}, stream=httpx.ByteStream(data))


class _Events(httpx.AsyncByteStream):
    def __init__(self, engine: str) -> None:
        self.engine = engine

    async def __aiter__(self):
        for i in range(3):
            yield f'data: {{"i": {i}, "engine": "{self.engine}"}}\n\n'.encode()
        yield b"data: [DONE]\n\n"


def _serve(engines: FakeEngines, check) -> None:
    """Run ``check(client)`` against a router on a free loopback port."""

    async def main():
        router = Router(ENGINES, workers_per_engine=2)
        router._http = httpx.AsyncClient(transport=httpx.MockTransport(engines))
        sock = bind("127.0.0.1", 0)
        server = await router.serve(sock)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        try:
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                await check(client, router)
        finally:
            server.close()
            await router.aclose()

    asyncio.run(main())


def test_concurrent_requests_go_to_the_least_busy_engine():
    engines = FakeEngines(delay=0.2)

    async def check(client, router):
        answers = await asyncio.gather(
            *(client.post("/inference/v1/generate", json={"token_ids": [i]}) for i in range(4))
        )
        assert [a.json()["echo"]["token_ids"] for a in answers] == [[0], [1], [2], [3]]
        assert sorted(a.json()["engine"] for a in answers) == sorted(ENGINES * 2)
        # One at a time, requests alternate.
        seq = [(await client.post("/inference/v1/generate", json={})).json()["engine"] for _ in range(4)]
        assert seq[0] != seq[1] and seq[:2] == seq[2:]
        assert router.served == [4, 4] and router.outstanding == [0, 0]

    _serve(engines, check)


def test_a_streamed_answer_comes_through_event_by_event():
    async def check(client, router):
        async with client.stream("POST", "/v1/completions", json={"stream": True}) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"] == "text/event-stream"
            events = [line async for line in resp.aiter_lines() if line]
        assert events[-1] == "data: [DONE]" and [json.loads(e[6:])["i"] for e in events[:-1]] == [0, 1, 2]

    _serve(FakeEngines(), check)


def test_a_weight_update_reaches_every_engine_and_answers_the_oldest_version():
    engines = FakeEngines()

    async def check(client, router):
        resp = await client.post("/update_weights", json={"weight_dir": "/w/step_3", "version": 3, "lag": 1})
        assert resp.status_code == 200 and resp.json()["version"] == 2
        assert engines.version == {ENGINES[0]: 3, ENGINES[1]: 2}
        health = (await client.get("/health")).json()
        assert health["version"] == 2 and [e["version"] for e in health["engines"]] == [3, 2]
        # One engine refusing makes the whole update fail with that engine's error.
        bad = await client.post("/update_weights", json={"weight_dir": "bad", "version": 4})
        assert bad.status_code == 400 and bad.json()["error"]["message"] == "no weights in bad"

    _serve(engines, check)


def test_init_broadcaster_gives_each_engine_its_own_ranks():
    engines = FakeEngines()

    async def check(client, router):
        body = {"host": "h", "port": 29501, "rank_offset": 1, "inference_world_size": 4}
        assert (await client.post("/init_broadcaster", json=body)).status_code == 200
        sent = {e: b for e, path, b in engines.calls if path == "/init_broadcaster"}
        assert {e: b["rank_offset"] for e, b in sent.items()} == {ENGINES[0]: 1, ENGINES[1]: 3}
        assert {b["inference_world_size"] for b in sent.values()} == {4}

    _serve(engines, check)


def test_health_is_503_while_any_engine_is_down():
    engines = FakeEngines()
    engines.down.add(ENGINES[1])

    async def check(client, router):
        resp = await client.get("/health")
        assert resp.status_code == 503 and "http://e1" in resp.json()["error"]["message"]
        assert (await client.get("/liveness")).status_code == 200

    _serve(engines, check)


def test_a_body_over_the_limit_is_413():
    async def check(client, router):
        router.max_body_bytes = 1024
        resp = await client.post("/inference/v1/generate", content=b"x" * 4096)
        assert resp.status_code == 413 and "over the limit" in resp.json()["error"]["message"]

    _serve(FakeEngines(), check)


@pytest.mark.parametrize(
    ("engines", "per", "visible", "want"),
    [(2, 1, None, ["0", "1"]), (2, 2, "4,5,6,7", ["4,5", "6,7"]), (3, 1, "7, 3,1", ["7", "3", "1"])],
)
def test_each_engine_sees_its_own_devices(engines, per, visible, want):
    from prl.engines import engine_devices

    assert engine_devices(engines, per, visible) == want


def test_too_few_devices_for_the_engines_is_a_config_error():
    from prl.config.errors import ConfigError
    from prl.engines import engine_devices

    with pytest.raises(ConfigError, match=r"inference.server.engines: 2 engines of 2 GPU\(s\) need 4 devices"):
        engine_devices(2, 2, "0,1")


def test_an_engine_that_exits_stops_the_router_with_its_log(tmp_path, capsys):
    import subprocess
    import sys

    from prl.config.components import InferenceConfig
    from prl.engines import _serve

    log = tmp_path / "engine_0.log"
    log.write_text("loading\nRuntimeError: CUDA out of memory\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    sock = bind("127.0.0.1", 0)
    try:
        code = asyncio.run(
            _serve(InferenceConfig(), sock, ["http://127.0.0.1:9"], [(proc, "http://127.0.0.1:9", log)], [])
        )
    finally:
        sock.close()
    out = capsys.readouterr().out
    assert code == 1
    assert "prl: inference engine 0 (http://127.0.0.1:9) exited with code 3" in out and "CUDA out of memory" in out


def test_a_dropped_engine_connection_is_sent_again_except_joining_a_broadcast_group():
    """An engine resets a kept-alive connection it left idle (after a long stop, say): the
    router resends as the client does (prl.client.DROPPED), so a paused engine that wakes up
    does not fail the run's /pause or a generation; /init_broadcaster is never sent twice."""
    engines = FakeEngines()
    engines.drops = {"/pause": 1, "/inference/v1/generate": DROPPED_RETRIES, "/init_broadcaster": 1}

    async def check(client, router):
        assert (await client.post("/pause", json={})).status_code == 200
        paused = [e for e, path, _ in engines.calls if path == "/pause"]
        assert len(paused) == 3 and set(paused) == set(ENGINES)  # one engine's /pause sent twice
        gen = await client.post("/inference/v1/generate", json={"token_ids": [7]})
        assert gen.status_code == 200 and gen.json()["echo"] == {"token_ids": [7]}
        joined = await client.post("/init_broadcaster", json={"host": "h", "port": 1, "rank_offset": 1})
        assert joined.status_code == 502 and "ReadError" in joined.json()["error"]["message"]
        sent = [e for e, path, _ in engines.calls if path == "/init_broadcaster"]
        assert sorted(sent) == sorted(ENGINES)  # one each, the dropped one not resent
        # more drops than resends: the engine's failure reaches the client
        engines.drops["/inference/v1/generate"] = DROPPED_RETRIES + 1
        assert (await client.post("/inference/v1/generate", json={})).status_code == 502

    _serve(engines, check)
