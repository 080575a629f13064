"""``prl rl --dry-run`` with ``trainer.model.routing_replay``: a backend that returns routed
experts (torch) is told to, a backend that cannot (vLLM) or an external server is refused
in one line naming the fields, exit 2 (``docs/moe.md``, routing replay)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from prl.cli.main import app
from prl.config.errors import ConfigError
from prl.config.replay import check_routing_replay

pytestmark = pytest.mark.usefixtures("fake_plugins", "hf_cache")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_trainer_torch")

SRC = '[{"name": "t", "env": {"taskset": {"id": "fake-tasks"}}}]'
REPLAY = ("--trainer.model.routing-replay", "true")


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory) -> str:
    model_init = pytest.importorskip("prl_model_init")
    return str(model_init.make_model(tmp_path_factory.mktemp("m") / "tiny-moe", "tiny-moe", seed=0))


def _rl(out, *extra: str, model: str | None = None):
    argv = ["rl", "--output-dir", str(out), "--run.name", "r", "--orchestrator.train.source", SRC, "--dry-run"]
    return CliRunner().invoke(app, [*argv, *(("--model.name", model) if model else ()), *extra])


def _refused(result, *texts: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    (line,) = [x for x in result.output.strip().splitlines() if "routing_replay" in x]
    for text in texts:
        assert text in line, result.output


def test_torch_backend_is_accepted(tmp_path, tiny_moe):
    result = _rl(tmp_path, *REPLAY, "--inference.backend.type", "torch", model=tiny_moe)
    assert result.exit_code == 0, result.output


def test_a_dense_model_is_refused(tmp_path):
    result = _rl(tmp_path, *REPLAY)  # the default model, Qwen3-0.6B, is dense
    _refused(result, "--trainer.model.routing_replay: Qwen/Qwen3-0.6B is a dense model")


def test_vllm_backend_is_refused_naming_the_fields(tmp_path, tiny_moe):
    pytest.importorskip("prl_inference_vllm")
    result = _rl(tmp_path, *REPLAY, "--inference.backend.type", "vllm", model=tiny_moe)
    _refused(result, "trainer.model.routing_replay", "routed_experts", "inference.backend.type 'vllm' does not return")


def test_external_server_is_refused(tmp_path, tiny_moe):
    result = _rl(tmp_path, *REPLAY, "--inference", "None", model=tiny_moe)
    _refused(result, "trainer.model.routing_replay", "external server")


def test_off_by_default_and_then_nothing_is_required(tmp_path):
    pytest.importorskip("prl_inference_vllm")
    assert _rl(tmp_path, "--inference.backend.type", "vllm").exit_code == 0


class _Backend:
    type = "torch"
    returns_routed_experts = True
    return_routed_experts = False


class _Cfg:
    def __init__(self, replay: bool, backend) -> None:
        self.trainer = type("T", (), {"model": type("M", (), {"replays_routing": lambda self: replay})()})()
        self.inference = type("I", (), {"backend": backend})() if backend is not None else None


def test_the_backend_is_told_to_return_them():
    backend = _Backend()
    check_routing_replay(_Cfg(False, backend))
    assert backend.return_routed_experts is False
    check_routing_replay(_Cfg(True, backend))
    assert backend.return_routed_experts is True
    with pytest.raises(ConfigError, match="inference is none"):
        check_routing_replay(_Cfg(True, None))
