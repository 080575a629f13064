"""The dashboard in a real headless browser (Debian's chromium driven by Selenium through
chromium-driver) over a run made by a tiny real ``prl rl`` with the token export on.

Every view is opened and must show real content from that run; a metric pane must grow
when a row is appended to ``metrics.jsonl`` while the page is open; screenshots of each
view are written under the test's tmp directory (``screenshots/``).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from prl.testing.configs import tiny_rl_toml

for _module in (
    "prl_model_init",
    "prl_inference_torch",
    "prl_launcher_local",
    "prl_tasks_builtin",
    "prl_trainer_torch",
):
    pytest.importorskip(_module)
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements-dev.txt)")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER),
        reason="Debian chromium and chromium-driver are not installed (plugins/dashboard/setup-chromium.sh)",
    ),
]
LIVE_SEEN: set[str] = set()  # live/ files seen while the tiny run ran (_watch_live)
REPORT = "---\ntitle: Tiny run notes\n---\n# What happened\n\nReward went **up** over `2` steps.\n"


def _make_run(base: Path) -> Path:
    """A two-step reverse-text ``prl rl`` on a tiny model made here, token export on."""
    from prl_model_init.build import make_model

    from prl.cli.commands import cmd_rl

    model = make_model(base / "model", preset="tiny")
    toml = tiny_rl_toml(base, model, {"trainer": {"optim": None, "enable_token_export": True}})
    done = threading.Event()
    watcher = threading.Thread(target=_watch_live, args=(base / "outputs" / "tiny", done), daemon=True)
    watcher.start()
    try:
        assert cmd_rl(["@", str(toml), "--run.name", "tiny"]) == 0
    finally:
        done.set()
        watcher.join(5)
    run = base / "outputs" / "tiny"
    (run / "reports").mkdir()
    (run / "reports" / "notes.md").write_text(REPORT)
    return run


def _watch_live(run: Path, done: threading.Event) -> None:
    """Record the in-flight episode files the run writes (polled every 2 ms)."""
    live = run / "monitors" / "file" / "live"
    while not done.is_set():
        try:
            LIVE_SEEN.update(p.relative_to(live).as_posix() for p in live.rglob("*.json*"))
        except OSError:
            pass  # removed between listing and reading
        time.sleep(0.002)


@pytest.fixture(scope="module")
def dashboard(serve_dashboard, tmp_path_factory):
    """(url, run_dir, screenshot dir): ``prl dashboard`` serving the run's output dir."""
    base = tmp_path_factory.mktemp("dash")
    run = _make_run(base)
    return serve_dashboard(base / "outputs"), run, base / "screenshots"


def _wait(driver, css: str, check=lambda els: bool(els), timeout: float = 20.0):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        try:  # views re-render as they poll: an element found a moment ago may be gone
            if check(found):
                return found
        except StaleElementReferenceException:
            pass
        time.sleep(0.2)
    shown = driver.find_element(By.ID, "main").text[:500]
    raise AssertionError(f"timed out waiting for {css!r}; page shows: {shown!r}")


def _attrs(driver, css: str, attr: str) -> list[str]:
    """``attr`` of every element matching ``css``, read in one script run (a re-render
    between finding an element and reading it cannot make it stale)."""
    script = "return [...document.querySelectorAll(arguments[0])].map(e => e.getAttribute(arguments[1]))"
    return driver.execute_script(script, css, attr)


def _open(driver, url: str, view: str, shots: Path) -> None:
    driver.get(f"{url}/#/run/tiny/{view}")
    driver.refresh()  # a hash change alone would keep the previous view's timers


def _shot(driver, shots: Path, name: str) -> None:
    shots.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(shots / f"{name}.png"))
    assert (shots / f"{name}.png").stat().st_size > 5000


def test_runs_overview_config_logs_and_report_render_real_content(dashboard, browser):
    url, run, shots = dashboard
    browser.get(url + "/")
    rows = _wait(browser, "#runs tr.run")
    assert "tiny" in rows[0].text and "rl" in rows[0].text
    _shot(browser, shots, "runs")

    _open(browser, url, "overview", shots)
    panes = _wait(browser, "#overview .pane[data-key='reward/all/mean']")
    assert int(panes[0].get_attribute("data-points")) == 2  # steps 1 and 2 of the orchestrator
    assert _wait(browser, "#overview .pane[data-key='loss/all'] polyline")
    _shot(browser, shots, "overview")

    _open(browser, url, "config", shots)
    text = _wait(browser, "#config-text", lambda e: e and "enable_token_export" in e[0].text)[0].text
    assert '"enable_token_export": true' in text
    _shot(browser, shots, "config")

    _open(browser, url, "logs", shots)
    _wait(browser, "#log-text", lambda e: e and "Step 2" in e[0].text and "trainer" in e[0].text)
    _shot(browser, shots, "logs")

    _open(browser, url, "report", shots)
    heading = _wait(browser, "#report h1")[0]
    assert heading.text == "What happened"
    assert browser.find_element("css selector", "#report strong").text == "up"
    _shot(browser, shots, "report")


def test_metrics_view_filters_and_follows_new_rows(dashboard, browser):
    url, run, shots = dashboard
    _open(browser, url, "metrics", shots)
    _wait(browser, "#metrics .pane")
    keys = set(_attrs(browser, "#metrics .pane", "data-key"))
    rows = [json.loads(x) for x in (run / "monitors/file/metrics.jsonl").read_text().splitlines()]
    assert keys == {k for r in rows for k, v in r.items() if k not in ("step", "time", "producer", "attempt")}
    box = browser.find_element("css selector", "#metric-filter")
    box.send_keys("^entropy/")
    _wait(browser, "#metrics .pane", lambda e: e and len(e) < len(keys))
    assert set(_attrs(browser, "#metrics .pane", "data-key")) == {k for k in keys if k.startswith("entropy/")}
    box.clear()
    box.send_keys("^loss/all$")
    pane = "#metrics .pane[data-key='loss/all']"
    _wait(browser, pane)
    assert _attrs(browser, pane, "data-points") == ["2"]
    with open(run / "monitors/file/metrics.jsonl", "a") as fh:  # a live run's next row
        fh.write(json.dumps({"step": 3, "time": time.time(), "loss/all": 0.5, "producer": "trainer"}) + "\n")
    _wait(browser, pane, lambda e: e and e[0].get_attribute("data-points") == "3", timeout=15)
    _shot(browser, shots, "metrics")


def test_traces_table_and_viewer_with_token_overlays(dashboard, browser):
    url, run, shots = dashboard
    _open(browser, url, "traces", shots)
    rows = _wait(browser, "#episodes tr.episode")
    assert len(rows) == 8  # 2 steps x batch of 4
    _shot(browser, shots, "traces")
    rows[0].click()
    box = _wait(browser, ".tokens[data-branch='0']")[0]
    assert "token export step 2" in browser.find_element("css selector", "section.branch h3").text
    assert "<|im_start|>" in box.text  # token text from the run's own tokenizer
    from selenium.webdriver.support.ui import Select

    pick = Select(browser.find_element("css selector", ".overlay-pick"))
    options = {o.get_attribute("value") for o in pick.options}
    assert {"advantages", "entropy", "trainer_logprobs", "mismatch_kl", "is_masked", "loss_mask"} <= options
    for overlay in ("entropy", "trainer_logprobs", "sampled_mask"):
        pick.select_by_value(overlay)
        assert box.get_attribute("data-overlay") == overlay
        assert int(box.get_attribute("data-coloured")) > 0
        _shot(browser, shots, f"trace-{overlay}")


def test_live_episodes_appear_while_running_and_are_gone_at_the_end(dashboard, browser):
    """The tiny run left its in-flight files while it ran and none once done; an episode
    written live here shows at the top of the traces view, its turns arrive in the viewer
    within the 1 s poll, and once it ends the viewer says so."""
    from prl_monitor_file import FileMonitor

    from prl.live import LiveEpisodes, report_turn

    url, run, shots = dashboard
    assert any(name.endswith(".jsonl") for name in LIVE_SEEN), LIVE_SEEN
    assert not list((run / "monitors" / "file" / "live").rglob("*.json*"))
    monitor = FileMonitor(FileMonitor.Config(), run, "orch", "tiny")
    episodes = LiveEpisodes([monitor])
    episodes.dispatch(
        "livedemo", {"env": "reverse-text", "task_id": "t-9", "group": "d9", "kind": "train", "version": 2}
    )
    running = episodes.running("livedemo", [{"role": "user", "content": "Reverse: live dashboard"}])
    running.__enter__()
    try:
        report_turn({"agent": "default", "turn": 1, "text": "draobhsad", "tokens": 5, "finish_reason": "stop"})
        _open(browser, url, "traces", shots)
        row = _wait(browser, "#live tr.live-row.running")[0]
        assert "livedemo" in row.text and "t-9" in row.text
        _shot(browser, shots, "traces-live")
        row.click()
        _wait(browser, "#live-events .live-turn")
        assert "Reverse: live dashboard" in browser.find_element("id", "live-events").text
        report_turn({"agent": "default", "turn": 2, "text": "draobhsad evil", "tokens": 7, "finish_reason": "stop"})
        turns = _wait(browser, "#live-events .live-turn", lambda els: len(els) == 2, timeout=5.0)
        assert "draobhsad evil" in turns[1].text
        _shot(browser, shots, "trace-live")
    finally:
        running.__exit__(None, None, None)
        monitor.close()
    assert "finished" in _wait(browser, "#live-done", timeout=5.0)[0].text
