"""Image content parts in served episodes: the base64 reaches the browser byte for byte (a
finished trace and a live prompt), and every response forbids images from other origins."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import random
import threading
import time
import urllib.request

import pytest
from prl_dashboard.cli import bind
from prl_monitor_file import FileMonitor

from prl.types import Branch, Trace

Image = pytest.importorskip("PIL.Image")
RUN = "/api/runs/run-img"


def _png(size: int) -> str:
    """A noisy ``size`` x ``size`` PNG as a data URL: noise does not compress, so a large
    image is a long string that any cap or rewrap on the way would break."""
    rng = random.Random(0)
    img = Image.frombytes("RGB", (size, size), bytes(rng.randrange(256) for _ in range(size * size * 3)))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


BIG, SMALL = _png(256), _png(8)  # about 260 kB and 0.3 kB


def _messages() -> list[dict]:
    return [
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": BIG}},
            {"type": "image", "image": SMALL},
            {"type": "text", "text": "How many red shapes are there?"},
        ]},
        {"role": "assistant", "content": "2"},
    ]  # fmt: skip


@pytest.fixture
def server(tmp_path):
    run = tmp_path / "outputs" / "run-img"
    orch = FileMonitor(FileMonitor.Config(), run, "orch", "run-img")
    orch.log({"reward/all/mean": 1.0}, 1)
    branch = Branch(token_ids=[1, 2, 3], sampled_mask=[False, True, True], logprobs=[0.0, -0.5, -0.5])
    trace = Trace("img-1", "train/0", "coloured-shapes", [branch], reward=1.0)
    trace.messages = _messages()
    orch.log_traces([dataclasses.asdict(trace)], 1)
    orch.log_live("live-1", {"event": "dispatch", "time": time.time(), "env": "coloured-shapes", "kind": "train"})
    orch.log_live("live-1", {"event": "start", "time": time.time(), "prompt": _messages()[:1]})
    srv = bind([tmp_path / "outputs"], "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    orch.close()


def _get(url: str) -> tuple[dict, bytes]:
    with urllib.request.urlopen(url, timeout=10) as res:
        return dict(res.headers), res.read()


def _decoded_size(url: str) -> tuple[int, int]:
    head, _, payload = url.partition(",")
    assert head == "data:image/png;base64"
    return Image.open(io.BytesIO(base64.b64decode(payload, validate=True))).size


def test_a_finished_episode_serves_its_image_parts_unchanged(server):
    _, body = _get(server + RUN + "/episodes/0")
    content = json.loads(body)["trace"]["messages"][0]["content"]
    assert content == _messages()[0]["content"]
    assert len(BIG) > 200_000 and _decoded_size(content[0]["image_url"]["url"]) == (256, 256)
    assert _decoded_size(content[1]["image"]) == (8, 8)


def test_a_live_episode_serves_its_prompt_images_unchanged(server):
    _, body = _get(server + RUN + "/live/live-1")
    (user,) = json.loads(body)["prompt"]
    assert user["content"][0]["image_url"]["url"] == BIG and _decoded_size(BIG) == (256, 256)


@pytest.mark.parametrize("path", ["/", "/static/traces.js", "/api/runs", RUN + "/episodes/0"])
def test_every_response_allows_images_only_from_itself_or_data_urls(server, path):
    headers, _ = _get(server + path)
    assert headers["Content-Security-Policy"] == "img-src 'self' data:"
