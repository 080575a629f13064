"""``prl eval`` through the CLI with a scripted policy: its log file, ``env_vars``, example
selection and the in-flight band."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest
from typer.testing import CliRunner

import prl.orchestrator.run
from prl.cli.main import app
from prl.tasks.testing import ByteRenderer, ScriptedClient, last_user


class _SlowClient(ScriptedClient):
    """Answers right after a short wait, counting the requests in flight."""

    def __init__(self, policy, state: dict) -> None:
        super().__init__(policy)
        self.state = state

    async def generate(self, prompt_ids, sampling):
        self.state["inflight"] += 1
        self.state["peak"] = max(self.state["peak"], self.state["inflight"])
        try:
            await asyncio.sleep(0.005)
            return await super().generate(prompt_ids, sampling)
        finally:
            self.state["inflight"] -= 1


@pytest.fixture
def policy(monkeypatch, hf_cache):
    """A scripted client that answers right and records what it saw (the default model's
    tokenizer looks cached: the scripted renderer never reads it)."""
    state: dict = {"env": [], "calls": 0, "prompts": [], "inflight": 0, "peak": 0}

    def answer(msgs):
        state["calls"] += 1
        state["env"].append(os.environ.get("PRL_TEST_EVAL_VAR"))
        state["prompts"].append(last_user(msgs))
        return last_user(msgs)[::-1]

    monkeypatch.setattr(prl.orchestrator.run, "build_client", lambda cfg: _SlowClient(answer, state))
    monkeypatch.setattr(prl.orchestrator.run, "build_renderer", lambda cfg: ByteRenderer())
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield state
    for h in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(h)
        h.close()
    root.setLevel(level)


def _eval(tmp_path, *extra: str):
    argv = ["eval", "reverse-text", "--env.taskset.num-eval", "4", "-o", str(tmp_path), "--run.name", "ev"]
    return CliRunner().invoke(app, [*argv, "--no-dashboard", *extra])


def test_eval_writes_its_log_and_honours_env_vars(tmp_path, policy, monkeypatch):
    monkeypatch.setenv("PRL_TEST_EVAL_VAR", "unset")  # restored after the test
    result = _eval(tmp_path, "--env-vars", '{"PRL_TEST_EVAL_VAR": "from-config"}')
    assert result.exit_code == 0, result.output
    assert policy["calls"] == 4 and set(policy["env"]) == {"from-config"}
    log = (tmp_path / "ev" / "logs" / "attempt_1" / "eval.log").read_text()
    assert "Evaluated reverse-text | 4 examples x 1 rollouts" in log
    assert (tmp_path / "ev" / "logs" / "latest" / "eval.log").exists()


def test_shortcut_with_sources_from_a_file_is_refused(tmp_path, policy):
    cfg = tmp_path / "eval.toml"
    cfg.write_text('[[source]]\nname = "a"\nenv.taskset.id = "reverse-text"\n')
    result = CliRunner().invoke(app, ["eval", "reverse-text", "@", str(cfg), "-o", str(tmp_path), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "cannot be combined with [[source]] blocks" in result.output and "Traceback" not in result.output
    assert policy["calls"] == 0


def test_select_include_and_exclude_pick_the_examples(tmp_path, policy):
    include = '["eval/0", "eval/1", "eval/2"]'
    result = _eval(tmp_path, "--select.include", include, "--select.exclude", '["eval/1"]')
    assert result.exit_code == 0, result.output
    assert "2 examples x 1 rollouts" in result.output and policy["calls"] == 2
    rows = (tmp_path / "ev" / "results" / "reverse-text.jsonl").read_text()
    assert '"eval/0"' in rows and '"eval/2"' in rows and '"eval/1"' not in rows


def test_select_of_an_unknown_task_is_a_one_line_usage_error(tmp_path, policy):
    result = _eval(tmp_path, "--select.include", '["eval/99"]')
    assert result.exit_code == 2, result.output
    assert "select.include of source 'reverse-text': no task 'eval/99'" in result.output
    assert "Traceback" not in result.output and policy["calls"] == 0


def test_pinned_band_is_a_fixed_limit(tmp_path, policy):
    result = _eval(tmp_path, "--env.taskset.num-eval", "12", "-r", "2", "-c", "3")
    assert result.exit_code == 0, result.output
    assert policy["calls"] == 24 and policy["peak"] == 3


def test_min_below_max_adapts_from_min(tmp_path, policy):
    band = ["--concurrency.min-inflight", "1", "--concurrency.max-inflight", "16"]
    result = _eval(tmp_path, "--env.taskset.num-eval", "40", *band)
    assert result.exit_code == 0, result.output
    # starts at one rollout in flight and grows with throughput, never past the max
    assert policy["calls"] == 40 and 1 < policy["peak"] <= 16
