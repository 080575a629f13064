"""The overview, overlaid runs, run status, eval results and the trace viewer's token text,
in headless Chromium over run directories written here the way runs write them (the file
monitor's own writer, resolved configs, ``processes.jsonl``, logs): seconds, no training.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from prl_monitor_file import FileMonitor

from prl import procinfo
from prl.types import Branch, Trace

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements-dev.txt)")
pytest.importorskip("prl_model_init")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER),
        reason="Debian chromium and chromium-driver are not installed (plugins/dashboard/setup-chromium.sh)",
    ),
]
KEY_ORDER = ["reward/all/mean", "eval/reverse-text/avg@1", "loss/all", "entropy/all/mean", "mismatch_kl/all/mean"]
KEY_ORDER += ["perf/throughput", "time/step"]


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _run(outputs: Path, name: str, model: str, max_steps: int, steps: int, t0: float, scale: float, pid: int) -> Path:
    """An RL run of ``steps`` steps (one second apart from ``t0``) of ``max_steps``, whose
    processes are ``pid``; an episode whose token ids spell ``hello world``."""
    run = outputs / name
    orch = FileMonitor(FileMonitor.Config(), run, "orch", name)
    trainer = FileMonitor(FileMonitor.Config(), run, "trainer", name)
    for step in range(1, steps + 1):
        stamp = {"time": t0 + step}
        orch.log({"reward/all/mean": scale * step, "time/step": 1.0, "batch/tokens": 64.0 * step} | stamp, step)
        trainer.log({"loss/all": scale / step, "entropy/all/mean": 2 - scale * step, "mismatch_kl/all/mean": 0.01}
                    | {"perf/throughput": 1000.0 + step, "optim/lr": 1e-3, "time/step": 0.5} | stamp, step)  # fmt: skip
        if step % 2 == 0:  # online eval every 2 steps
            orch.log({"eval/reverse-text/avg@1": scale * step / 2} | stamp, step)
    if steps:
        ids = _tokenizer_ids(model)
        branch = Branch(token_ids=ids, sampled_mask=[True] * len(ids), logprobs=[-0.5] * len(ids))
        orch.log_traces([dataclasses.asdict(Trace(f"{name}-t", "t", "reverse-text", [branch], reward=1.0))], 1)
    orch.close()
    trainer.close()
    resolved = run / "configs" / "attempt_1" / "resolved"
    resolved.mkdir(parents=True)
    (resolved / "trainer.json").write_text(json.dumps({"model": {"name": model}, "max_steps": max_steps}))
    (run / "configs" / "latest").symlink_to("attempt_1")
    (run / "logs" / "attempt_1").mkdir(parents=True)
    (run / "logs" / "latest").symlink_to("attempt_1")
    procinfo.record(run / "logs" / "latest", "trainer", pid, run / "logs" / "latest" / "trainer.log")
    return run


_IDS: dict[str, list[int]] = {}


def _tokenizer_ids(model: str) -> list[int]:
    if not Path(model).is_dir():
        return [10, 11, 12]
    if model not in _IDS:
        from transformers import AutoTokenizer

        _IDS[model] = AutoTokenizer.from_pretrained(model).encode("hello world")
    return _IDS[model]


def _eval_run(outputs: Path) -> Path:
    """A finished ``prl eval`` of two sources: reverse-text rewards 1,0,1,1 (0.75 ± 0.25)
    and math rewards 0.5,0.5,0,1 (0.5 ± 0.204)."""
    run = outputs / "eval-run"
    resolved = run / "configs" / "attempt_1" / "resolved"
    resolved.mkdir(parents=True)
    (resolved / "eval.json").write_text(json.dumps({"source": [{"name": "reverse-text"}, {"name": "math"}]}))
    (run / "configs" / "latest").symlink_to("attempt_1")
    (run / "results").mkdir()
    for source, rewards in {"reverse-text": [1, 0, 1, 1], "math": [0.5, 0.5, 0, 1]}.items():
        rows = [{"group": str(i), "reward": r, "error": None} for i, r in enumerate(rewards)]
        (run / "results" / f"{source}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        mean = sum(rewards) / len(rewards)
        (run / "results" / f"{source}.json").write_text(json.dumps({f"eval/{source}/avg@1": mean}))
    monitor = FileMonitor(FileMonitor.Config(), run, "eval", "eval-run")
    monitor.log({"eval/reverse-text/avg@1": 0.75, "eval/math/avg@1": 0.5}, 0)
    monitor.close()
    return run


@pytest.fixture(scope="module")
def dashboard(serve_dashboard, tmp_path_factory):
    """``prl dashboard`` over: rl-done (finished), rl-b (failed with a traceback), rl-live
    (running: this test's own pid, a row a second ago), rl-stuck (stalled: alive, last row
    1000 s ago with 1 s steps), rl-noname (a model that is nowhere) and eval-run."""
    from prl_model_init.build import make_model

    base = tmp_path_factory.mktemp("overview")
    model = str(make_model(base / "model", preset="tiny"))
    outputs, now, dead = base / "outputs", time.time(), _dead_pid()
    _run(outputs, "rl-done", model, 4, 4, now - 600, 0.1, dead)
    failed = _run(outputs, "rl-b", model, 6, 3, now - 500, 0.2, dead)
    (failed / "logs" / "latest" / "trainer.log").write_text(
        "2026-01-01 00:00:01,000 INFO prl.trainer: step 3\nTraceback (most recent call last):\n"
        '  File "train.py", line 1, in <module>\nRuntimeError: boom\n'
    )
    _run(outputs, "rl-live", model, 10, 2, now - 3, 0.1, os.getpid())
    _run(outputs, "rl-stuck", model, 10, 2, now - 1003, 0.1, os.getpid())
    _run(outputs, "rl-noname", "nowhere/tiny-missing", 1, 1, now - 700, 0.1, dead)
    _eval_run(outputs)
    return serve_dashboard(outputs), base / "screenshots"


def _js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def _until(driver, script: str, *args, timeout: float = 15.0):
    """The script's value once truthy (views render after their requests return)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = _js(driver, script, *args)
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out on {script!r}; page shows: {_js(driver, 'return main.innerText')[:600]!r}")


def _open(driver, url: str, fragment: str) -> None:
    driver.get(f"{url}/{fragment}")
    driver.refresh()  # a hash change alone keeps the previous view's timers


def _shot(driver, shots: Path, name: str) -> None:
    shots.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(shots / f"{name}.png"))


def test_runs_table_shows_what_each_run_directory_says_about_its_status(dashboard, browser):
    url, shots = dashboard
    _open(browser, url, "#/")
    script = (
        "return [...document.querySelectorAll('#runs tr.run')].map(r => "
        "[r.dataset.run, r.querySelector('.status').textContent, r.querySelector('.reason').textContent])"
    )
    rows = {run: (status, why) for run, status, why in _until(browser, script)}
    assert {run: status for run, (status, _) in rows.items()} == {
        "rl-done": "finished", "rl-b": "failed", "rl-live": "running", "rl-stuck": "stalled",
        "rl-noname": "finished", "eval-run": "finished",
    }  # fmt: skip
    assert "RuntimeError: boom" in rows["rl-b"][1] and "step 3 of 6" in rows["rl-b"][1]
    assert "no new metric for 10" in rows["rl-stuck"][1]
    _shot(browser, shots, "runs")


def test_overview_puts_the_key_curves_first_as_charts_with_axes(dashboard, browser):
    url, shots = dashboard
    _open(browser, url, "#/run/rl-done/overview")
    keys = _until(browser, "return [...document.querySelectorAll('#key-metrics .pane')].map(p => p.dataset.key)")
    assert keys == KEY_ORDER
    rest = _js(
        browser, "return [...document.querySelectorAll('#overview details.section .pane')].map(p => p.dataset.key)"
    )
    assert rest == ["batch/tokens", "optim/lr"]  # after the key curves, alphabetically
    reward = "#key-metrics .pane[data-key='reward/all/mean']"
    top, left = _js(
        browser, f'const r = document.querySelector("{reward}").getBoundingClientRect(); return [r.top, r.left]'
    )
    assert top < 200 and left < 50  # first, above the fold
    ticks = _js(browser, f'return [...document.querySelectorAll("{reward} text.tick")].map(t => t.textContent)')
    assert {"1", "2", "3", "4"} <= set(ticks) and "0.2" in ticks  # steps on x, rewards 0.1..0.4 on y
    assert "0.4" in _js(browser, f'return document.querySelector("{reward} h4 .last").textContent')
    first_row = _js(browser, "return [...document.querySelectorAll('#key-metrics .pane')].map(p => p.offsetTop)")
    assert first_row.count(first_row[0]) >= 3  # a grid, not one column, at 1400 px
    evalp = "#key-metrics .pane[data-key='eval/reverse-text/avg@1']"
    assert _js(browser, f'return document.querySelector("{evalp}").dataset.points') == "2"  # steps 2 and 4: a line
    assert _js(browser, f'return document.querySelectorAll("{evalp} polyline").length') == 1
    _shot(browser, shots, "overview")


def test_overlaid_runs_share_each_chart_in_their_own_colours(dashboard, browser):
    url, shots = dashboard
    _open(browser, url, "#/run/rl-done/overview")
    _until(browser, "return document.querySelector('#overlay-pick input[value=\"rl-b\"]')")
    _js(browser, "const d = document.querySelector('#overlay-pick'); d.open = true")
    browser.find_element("css selector", "#overlay-pick input[value='rl-b']").click()
    assert _until(browser, "return location.hash").endswith("?with=rl-b")
    reward = "#key-metrics .pane[data-key='reward/all/mean']"
    _until(browser, f"return document.querySelector(\"{reward}\")?.dataset.series === '2'")
    colours = _js(
        browser, f"return [...document.querySelectorAll(\"{reward} polyline\")].map(p => p.getAttribute('stroke'))"
    )
    assert len(colours) == 2 and colours[0] != colours[1]
    legend = _js(
        browser,
        "return [...document.querySelectorAll('#run-legend .legend-run')].map(l => l.dataset.run)",
    )
    assert legend == ["rl-done", "rl-b"]
    # The legend's swatches are the lines' colours (compared as the browser writes them).
    swatches = _js(
        browser,
        "return [...document.querySelectorAll('#run-legend .swatch')].map(s => getComputedStyle(s).backgroundColor)",
    )
    lines = _js(
        browser, f'return [...document.querySelectorAll("{reward} polyline")].map(p => getComputedStyle(p).stroke)'
    )
    assert swatches == lines
    _shot(browser, shots, "overlay")

    _open(browser, url, "#/")  # the same from the runs table
    _until(browser, "return document.querySelector('#runs tr.run')")
    for run in ("rl-live", "eval-run"):
        browser.find_element("css selector", f"#runs tr[data-run='{run}'] input").click()
    browser.find_element("id", "overlay-go").click()
    assert _until(browser, "return location.hash").startswith("#/run/rl-live/overview?with=eval-run")
    _until(browser, "return document.querySelectorAll('#run-legend .legend-run').length === 2")


def test_eval_run_shows_mean_and_standard_error_per_source(dashboard, browser):
    url, shots = dashboard
    _open(browser, url, "#/run/eval-run/overview")
    bars = _until(browser, "return [...document.querySelectorAll('#eval-results rect.bar')].map(b => +b.dataset.value)")
    assert bars == [0.5, 0.75]  # math, reverse-text
    assert _js(browser, "return document.querySelectorAll('#eval-results line.errbar').length") == 6
    rows = _js(browser, "return [...document.querySelectorAll('#eval-results tr.result')].map(r => r.innerText)")
    assert "0.75 ± 0.25" in rows[1] and "reverse-text" in rows[1] and "avg@1 0.75" in rows[1]
    assert "0.5 ± 0.2041" in rows[0]
    _shot(browser, shots, "eval")


def test_trace_viewer_shows_token_text_or_says_why_it_cannot(dashboard, browser):
    url, shots = dashboard
    _open(browser, url, "#/run/rl-done/traces/0")
    text = _until(browser, "return document.querySelector(\".tokens[data-branch='0']\")?.innerText")
    assert "hello" in text and "world" in text and "[" not in text
    assert not _js(browser, "return document.querySelector('#token-notice')")
    _shot(browser, shots, "trace")
    _open(browser, url, "#/run/rl-noname/traces/0")
    notice = _until(browser, "return document.querySelector('#token-notice')?.innerText")
    assert notice.startswith("showing token ids: tokenizer nowhere/tiny-missing not found: ")
    assert "Hugging Face cache" in notice
    assert _js(browser, "return document.querySelector(\".tokens[data-branch='0']\").innerText") == "[10][11][12]"
    _shot(browser, shots, "trace-ids")
