"""Image parts of a rollout's messages in headless Chromium: inline PNG/JPEG data URLs become
small thumbnails in the transcript and the live view; a remote URL, an SVG and a part with
no image are short placeholders, and the browser never requests the remote URL.
"""

from __future__ import annotations

import base64
import dataclasses
import http.server
import io
import shutil
import threading
import time

import pytest
from prl_monitor_file import FileMonitor

from prl.types import Branch, Trace

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements-dev.txt)")
Image = pytest.importorskip("PIL.Image")
ImageDraw = pytest.importorskip("PIL.ImageDraw")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER),
        reason="Debian chromium and chromium-driver are not installed (plugins/dashboard/setup-chromium.sh)",
    ),
]
SVG = "data:image/svg+xml;base64," + base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>").decode()


def _data_url(size: int, fmt: str) -> str:
    img = Image.new("RGB", (size, size), "white")
    ImageDraw.Draw(img).ellipse((size // 4, size // 4, 3 * size // 4, 3 * size // 4), fill=(220, 30, 30))
    out = io.BytesIO()
    img.save(out, format=fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(out.getvalue()).decode()


class _Probe(http.server.BaseHTTPRequestHandler):
    """Counts requests: the remote image URL points here and must never be fetched."""

    hits: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def probe():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Probe)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/remote.png"
    srv.shutdown()


@pytest.fixture(scope="module")
def dashboard(serve_dashboard, tmp_path_factory, probe):
    """``prl dashboard`` over one run: a finished episode and a live one, both with images."""
    base = tmp_path_factory.mktemp("images")
    user = {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": _data_url(64, "PNG")}},
        {"type": "image", "image": _data_url(200, "JPEG")},
        {"type": "image_url", "image_url": {"url": probe}},
        {"type": "image_url", "image_url": {"url": SVG}},
        {"type": "image"},
        {"type": "text", "text": "How many red shapes are there?"},
    ]}  # fmt: skip
    orch = FileMonitor(FileMonitor.Config(), base / "outputs" / "run-img", "orch", "run-img")
    branch = Branch(token_ids=[1, 2, 3], sampled_mask=[False, True, True], logprobs=[0.0, -0.5, -0.5])
    trace = Trace("img-1", "train/0", "coloured-shapes", [branch], reward=1.0)
    trace.messages = [user, {"role": "assistant", "content": "1"}]
    orch.log_traces([dataclasses.asdict(trace)], 1)
    orch.log_live("live-1", {"event": "start", "time": time.time(), "env": "coloured-shapes", "prompt": [user]})
    orch.close()
    return serve_dashboard(base / "outputs"), base / "screenshots"


def _until(driver, script: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    shown = driver.execute_script("return main.innerText")[:600]
    raise AssertionError(f"timed out on {script!r}; page shows: {shown!r}")


# [natural width, shown width, shown height, src scheme] of each thumbnail, once all decoded
THUMBS = (
    "const imgs = [...document.querySelectorAll('{box} img')];"
    "if (!imgs.length || !imgs.every(i => i.complete)) return null;"
    "return imgs.map(i => [i.naturalWidth, i.getBoundingClientRect().width, i.getBoundingClientRect().height,"
    " i.getAttribute('src').slice(0, 15), i.className])"
)
PLACEHOLDERS = "return [...document.querySelectorAll('{box} .img-placeholder')].map(s => s.textContent)"
EXPECTED_PLACEHOLDERS = [
    "[image: remote URL, not loaded]",
    "[image: unsupported image/svg+xml URL]",
    "[image: no image data]",
]


def test_transcript_shows_image_parts_as_thumbnails_and_never_fetches_remote_urls(dashboard, browser, probe):
    url, shots = dashboard
    browser.get(f"{url}/#/run/run-img/traces/0")
    browser.refresh()
    thumbs = _until(browser, THUMBS.format(box="#transcript"))
    assert [t[0] for t in thumbs] == [64, 200]  # both decoded: the base64 arrived intact
    assert all(0 < w <= 96 and 0 < h <= 96 for _, w, h, _, _ in thumbs)
    assert [t[3] for t in thumbs] == ["data:image/png;", "data:image/jpeg"]
    assert browser.execute_script(PLACEHOLDERS.format(box="#transcript")) == EXPECTED_PLACEHOLDERS
    text = browser.execute_script("return document.querySelector('#transcript').innerText")
    assert "How many red shapes are there?" in text and "base64" not in text
    shots.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(shots / "transcript-images.png"))
    browser.find_element("css selector", "#transcript img.thumb").click()  # a click enlarges it
    assert browser.execute_script("return document.querySelector('#transcript img.thumb').width") > 96
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(r => r.name)")
    assert not [r for r in resources if "remote.png" in r] and _Probe.hits == []


def test_live_view_shows_the_prompt_images_as_thumbnails(dashboard, browser):
    url, _ = dashboard
    browser.get(f"{url}/#/run/run-img/traces/live:live-1")
    browser.refresh()
    thumbs = _until(browser, THUMBS.format(box="#live-events"))
    assert [t[0] for t in thumbs] == [64, 200] and all(w <= 96 for _, w, _, _, _ in thumbs)
    assert browser.execute_script(PLACEHOLDERS.format(box="#live-events")) == EXPECTED_PLACEHOLDERS
    assert _Probe.hits == []
