"""Component logs, log level and ``env_vars`` of the commands that run in-process.

``prl sft`` (without online eval) trains in the launching process and ``prl eval`` runs
there too; both must still leave their lines in ``logs/attempt_N/`` and honour
``env_vars``, like the children a launcher starts. The level defaults to
``$PRL_LOG_LEVEL``, else ``$PRIME_LOG_LEVEL``; ``log.json_logging`` writes NDJSON.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Literal

import pytest
from typer.testing import CliRunner

from prl import hookimpl
from prl.cli.main import app
from prl.config.sections import LogConfig
from prl.contracts.trainer import Trainer, TrainerBackendConfig
from prl.logs import setup_logging

SRC = '[{"name": "t", "env": {"taskset": {"id": "fake-tasks"}}}]'
SEEN: dict[str, str | None] = {}


class _RecordingTrainer(Trainer):
    type = "recording"

    class Config(TrainerBackendConfig):
        type: Literal["recording"] = "recording"
        """Tag."""

    @classmethod
    def run_sft(cls, config) -> int:
        setup_logging(config.log)  # as a trainer's entry point does
        logging.getLogger("prl.test").info("sft step 1/1 loss 0.5")
        SEEN["var"] = os.environ.get("PRL_TEST_VAR")
        return 0

    @classmethod
    def run_rl(cls, config) -> int:
        return 0


class _Plugin:
    @staticmethod
    @hookimpl
    def prl_register_trainers():
        return [_RecordingTrainer]


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(h)
        h.close()
    root.setLevel(level)


def _resolved(out, name: str, run: str = "r") -> dict:
    return json.loads((out / run / "configs" / "latest" / "resolved" / f"{name}.json").read_text())


def _rl(out, *extra: str):
    argv = ["rl", "--output-dir", str(out), "--run.name", "r", "--orchestrator.train.source", SRC, "--dry-run"]
    return CliRunner().invoke(app, [*argv, *extra])


@pytest.mark.parametrize(
    ("env", "flags", "want"),
    [
        ({"PRIME_LOG_LEVEL": "DEBUG"}, (), "debug"),
        ({"PRIME_LOG_LEVEL": "debug", "PRL_LOG_LEVEL": "warning"}, (), "warning"),
        ({"PRL_LOG_LEVEL": "warning"}, ("--log.level", "error"), "error"),
        ({}, (), "info"),
    ],
)
def test_log_level_comes_from_flag_then_env(fake_plugins, hf_cache, tmp_path, monkeypatch, env, flags, want):
    monkeypatch.delenv("PRL_LOG_LEVEL", raising=False)
    monkeypatch.delenv("PRIME_LOG_LEVEL", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = _rl(tmp_path, *flags)
    assert result.exit_code == 0, result.output
    for component in ("trainer", "orchestrator", "inference"):
        assert _resolved(tmp_path, component)["log"]["level"] == want


def test_bad_log_level_variable_is_a_one_line_usage_error(fake_plugins, hf_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIME_LOG_LEVEL", "loud")
    monkeypatch.delenv("PRL_LOG_LEVEL", raising=False)
    result = _rl(tmp_path)
    assert result.exit_code == 2
    assert "$PRIME_LOG_LEVEL: 'loud' is not a log level" in result.output
    assert "Traceback" not in result.output


def test_json_logging_writes_ndjson(tmp_path, restore_logging):
    setup_logging(LogConfig(level="info", json_logging=True), tmp_path / "x.log")
    logging.getLogger("prl.test").info("hello %s", "world")
    logging.getLogger("prl.test").debug("not at info")
    rows = [json.loads(line) for line in (tmp_path / "x.log").read_text().splitlines()]
    assert [(r["level"], r["logger"], r["message"]) for r in rows] == [("info", "prl.test", "hello world")]


def test_sft_in_process_writes_trainer_log_and_honours_env_vars(
    register_plugin, hf_cache, tmp_path, monkeypatch, restore_logging
):
    register_plugin(_Plugin(), "recording-trainer", "prl-recording")
    monkeypatch.setenv("PRL_TEST_VAR", "unset")  # restored after the test
    argv = ["sft", "--trainer-type", "recording", "--output-dir", str(tmp_path), "--run.name", "s"]
    argv += ["--env-vars", '{"PRL_TEST_VAR": "from-config"}', "--log.json-logging"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert SEEN["var"] == "from-config"
    (line,) = (tmp_path / "s" / "logs" / "attempt_1" / "trainer.log").read_text().splitlines()
    assert json.loads(line)["message"] == "sft step 1/1 loss 0.5"
    assert "PRL_LOG_FILE" not in os.environ


def test_a_closed_earlier_stderr_does_not_break_later_lines(monkeypatch, capsys):
    """A runner that captures stderr per call (the CLI test runner, a notebook cell) hands
    the handler a stream it later closes; the next call's lines must still come out."""
    import io
    import sys

    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    setup_logging(LogConfig())
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("prl.test").warning("still heard")
    logging.getLogger("httpx2").info("HTTP Request: GET http://hub/api/models/x")
    assert "still heard" in second.getvalue()
    assert "Logging error" not in second.getvalue() and "HTTP Request" not in second.getvalue()
