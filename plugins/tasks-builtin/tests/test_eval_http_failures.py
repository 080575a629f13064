"""``prl eval`` as a user runs it, against no server and against a server that answers some
requests with HTTP 500: a clear one-line error in the first case, and in the second a
failed-rollout count next to a mean over the rollouts that completed."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from prl.serving import free_port


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("prl_model_init")
    from prl_model_init.build import make_model

    return make_model(tmp_path_factory.mktemp("eval-http") / "model", preset="tiny")


def _prl_eval(tmp_path, base_url: str, *extra: str) -> subprocess.CompletedProcess:
    argv = ["eval", "reverse-text", "--client.base-url", base_url, "-n", "6"]
    argv += ["-o", str(tmp_path / "out"), "--run.name", "ev", "--no-dashboard", *extra]
    return subprocess.run([sys.executable, "-m", "prl", *argv], capture_output=True, text=True, timeout=120)


def test_no_server_is_one_line_and_exit_2_with_no_results(tmp_path):
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    result = _prl_eval(tmp_path, url)  # the default model: the server is checked before it is needed
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"Environment error: no server at {url}: start `prl inference` or set --client.base-url"
    ]
    assert "Traceback" not in result.stdout + result.stderr
    assert not list((tmp_path / "out").glob("**/results/*.json"))


class _ReversingServer(BaseHTTPRequestHandler):
    """Answers every eval prompt of reverse-text with its exact reversal, except the first
    ``fail_first`` generate requests, which get HTTP 500."""

    tokenizer = None
    texts: list[str] = []
    fail_first = 0
    seen = 0
    lock = threading.Lock()

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, {"status": "ok"})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            type(self).seen += 1
            failing = self.seen <= self.fail_first
        if failing:
            self._send(500, {"error": {"message": "engine overloaded"}})
            return
        prompt = self.tokenizer.decode(request["token_ids"])
        text = next(t for t in self.texts if t in prompt)
        ids = self.tokenizer.encode(text[::-1], add_special_tokens=False) + [self.tokenizer.eos_token_id]
        choice = {"token_ids": ids, "logprobs": {"content": [{"logprob": -0.1} for _ in ids]}, "finish_reason": "stop"}
        self._send(200, {"choices": [choice]})


@pytest.fixture
def flaky_server(tiny_model):
    from prl_tasks_builtin.reverse_text import ReverseText
    from transformers import AutoTokenizer

    handler = type("Handler", (_ReversingServer,), {"seen": 0, "fail_first": 2})
    handler.tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    handler.texts = [t.data["text"] for t in ReverseText(ReverseText.Config()).tasks("eval")]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_failed_rollouts_are_counted_and_the_mean_is_over_the_rest(tmp_path, tiny_model, flaky_server):
    result = _prl_eval(tmp_path, flaky_server, "-m", str(tiny_model), "-c", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 of 6 rollouts failed: InferenceError: POST /inference/v1/generate -> HTTP 500: engine overloaded" in (
        result.stdout
    )
    summary = json.loads((tmp_path / "out" / "ev" / "results" / "reverse-text.json").read_text())
    rows = [
        json.loads(x) for x in (tmp_path / "out" / "ev" / "results" / "reverse-text.jsonl").read_text().splitlines()
    ]
    completed = [r["reward"] for r in rows if r["error"] is None]
    assert len(rows) == 6 and len(completed) == 4 and summary["failed_rollouts"] == 2
    # the four answered rollouts reversed their text exactly: the mean is theirs, not 4/6
    assert summary["eval/reverse-text/avg@1"] == pytest.approx(sum(completed) / 4) == pytest.approx(1.0)
    assert "avg@1 1.0000" in result.stdout
