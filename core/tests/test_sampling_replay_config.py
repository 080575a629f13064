"""``prl rl --dry-run`` refuses a loss that reads sampling masks (IPO's score_centering) when
the run cannot produce them: a backend that returns none (vLLM), an external server, or
untruncated train sampling. One line naming the fields, exit 2 (``docs/offload-and-replay.md``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

pytestmark = pytest.mark.usefixtures("fake_plugins", "hf_cache")
pytest.importorskip("prl_loss_ipo")
pytest.importorskip("prl_inference_torch")

SRC = '[{"name": "t", "env": {"taskset": {"id": "fake-tasks"}}}]'
CENTERING = ("--trainer.loss.type", "ipo", "--trainer.loss.score-centering")
TOP_P = ("--orchestrator.train.sampling.top-p", "0.9")


def _rl(out, *extra: str):
    argv = ["rl", "--output-dir", str(out), "--run.name", "r", "--orchestrator.train.source", SRC, "--dry-run"]
    return CliRunner().invoke(app, [*argv, *extra])


def _refused(result, *texts: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for text in texts:
        assert text in result.output, result.output


def test_torch_backend_with_top_p_is_accepted(tmp_path):
    result = _rl(tmp_path, *CENTERING, *TOP_P, "--inference.backend.type", "torch")
    assert result.exit_code == 0, result.output


def test_top_k_alone_truncates_too(tmp_path):
    result = _rl(tmp_path, *CENTERING, "--orchestrator.train.sampling.top-k", "20")
    assert result.exit_code == 0, result.output


def test_vllm_backend_is_refused_naming_both_fields(tmp_path):
    pytest.importorskip("prl_inference_vllm")
    result = _rl(tmp_path, *CENTERING, *TOP_P, "--inference.backend.type", "vllm")
    _refused(result, "trainer.loss.score_centering", "inference.backend.type 'vllm' does not return")


def test_external_server_is_refused(tmp_path):
    result = _rl(tmp_path, *CENTERING, *TOP_P, "--inference", "None")
    _refused(result, "trainer.loss.score_centering", "external server")


def test_untruncated_sampling_is_refused_as_the_spec_requires(tmp_path):
    result = _rl(tmp_path, *CENTERING)
    _refused(result, "trainer.loss.score_centering", "orchestrator.train.sampling has top_p = 1 and no top_k")


def test_a_source_that_undoes_the_truncation_is_named(tmp_path):
    src = '[{"name": "flat", "env": {"taskset": {"id": "fake-tasks"}}, "sampling": {"top_p": 1.0}}]'
    argv = ["rl", "--output-dir", str(tmp_path), "--run.name", "r", "--orchestrator.train.source", src, "--dry-run"]
    result = CliRunner().invoke(app, [*argv, *CENTERING, *TOP_P])
    _refused(result, "source 'flat' sampling has top_p = 1")


def test_without_score_centering_nothing_is_required(tmp_path):
    pytest.importorskip("prl_inference_vllm")
    result = _rl(tmp_path, "--trainer.loss.type", "ipo", "--inference.backend.type", "vllm")
    assert result.exit_code == 0, result.output
