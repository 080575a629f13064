"""What the dashboard's browser tests share: ``prl dashboard`` started over an outputs
folder, and one headless Chromium per test module."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="session")
def serve_dashboard() -> Iterator[Callable[[Path], str]]:
    """``serve(outputs)`` starts ``prl dashboard outputs --port 0`` and returns its URL; every
    server started this way is stopped at the end of the session."""
    procs: list[subprocess.Popen] = []

    def serve(outputs: Path) -> str:
        prl = Path(sys.executable).with_name("prl")
        proc = subprocess.Popen([str(prl), "dashboard", str(outputs), "--port", "0"], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline()  # "Dashboard · http://localhost:<port> (...)"
        assert line.startswith("Dashboard · http://"), line
        return line.split()[2]

    yield serve
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (the modules that use it skip where it is not installed)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()
