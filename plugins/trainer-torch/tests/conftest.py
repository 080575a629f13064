"""Fixtures: a tiny model made locally, reverse-text data, and a qwen3 renderer.

The renderer is prl-renderers' ``qwen3`` when that distribution is installed; otherwise a
thin adapter over the ``renderers`` package's Qwen3Renderer (the chat format of the tiny
model) is registered for the session, so these tests do not wait on another distribution.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Literal

import pytest

from prl.contracts.renderer import Rendered, Renderer, RendererConfig
from prl.plugins import get_registry, register_inline


class _Qwen3Adapter(Renderer):
    name = "qwen3"

    class Config(RendererConfig):
        name: Literal["qwen3"] = "qwen3"
        """Renderer tag."""

    def __init__(self, config, tokenizer: str) -> None:
        super().__init__(config, tokenizer)
        from transformers import AutoTokenizer

        from renderers import Qwen3Renderer

        self.inner = Qwen3Renderer(AutoTokenizer.from_pretrained(tokenizer))

    def render(self, messages, tools=None, add_generation_prompt=False) -> Rendered:
        out = self.inner.render(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        roles = [out.message_roles[i] if i >= 0 else "template" for i in out.message_indices]
        rendered = Rendered(list(out.token_ids), list(out.message_indices), roles)
        rendered.sampled_mask = list(out.sampled_mask)
        return rendered

    def parse_response(self, token_ids, tools=None, prompt_ids=None):
        parsed = self.inner.parse_response(token_ids)
        return {
            "content": parsed.content,
            "reasoning_content": parsed.reasoning_content,
            "tool_calls": parsed.tool_calls,
        }

    def get_stop_token_ids(self):
        return list(self.inner.get_stop_token_ids())


class _AdapterPlugin:
    from prl import hookimpl

    @staticmethod
    @hookimpl
    def prl_register_renderers():
        return [_Qwen3Adapter]


def pytest_configure(config):
    # One OpenMP thread per process: the CI box has two cores and torchrun tests start two ranks.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if "qwen3" not in get_registry().classes("renderers"):
        register_inline(_AdapterPlugin, "trainer-torch-test-renderer")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny", "tiny", seed=0)


@pytest.fixture(scope="session")
def reverse_data(tmp_path_factory) -> tuple[Path, Path]:
    from prl_trainer_torch.reverse_text import write_dataset

    return write_dataset(tmp_path_factory.mktemp("data"), n_train=400, n_val=40, seed=0)


@pytest.fixture
def sft_config():
    """Builds an SFTConfig for the tiny model (see :func:`make_sft_config`)."""
    return make_sft_config


@pytest.fixture
def rl_config():
    """Builds an RL TrainerConfig for the tiny model (see :func:`make_rl_config`)."""
    return make_rl_config


@pytest.fixture
def weight_consumer():
    """The orchestrator's side of the weight handshake (see :class:`WeightConsumer`)."""
    return WeightConsumer


def _merged(raw: dict, overrides: dict) -> dict:
    """``raw`` with ``overrides`` applied; a dict override updates a dict section."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return raw


def _only_listed_monitors(cfg, listed: dict):
    for key in type(cfg.monitors).model_fields:
        if key not in listed:
            setattr(cfg.monitors, key, None)
    return cfg


def make_rl_config(tmp_path: Path, model: Path, **overrides):
    """An RL TrainerConfig (ipo, two steps, seq_len 24) writing only file metrics."""
    from prl.config.components import TrainerConfig

    raw = {
        "output_dir": str(tmp_path / "outputs"),
        "run": {"name": "rl"},
        "model": {"name": str(model), "seq_len": 24},
        "optim": {"lr": 1e-3},
        "loss": {"type": "ipo", "eps": 0.5},
        "max_steps": 2,
        "weight_broadcast": {"timeout": 60},
        "monitors": {"file": {}},
    }
    raw = _merged(raw, overrides)
    return _only_listed_monitors(TrainerConfig.model_validate(raw), raw["monitors"])


class WeightConsumer(threading.Thread):
    """The orchestrator's side of the weight handshake: acknowledges versions in order and
    keeps the weights of each."""

    def __init__(self, run_dir: Path, versions: list[int]) -> None:
        from prl_weights_filesystem import FilesystemWeights

        super().__init__(daemon=True)
        self.transport = FilesystemWeights(FilesystemWeights.Config(timeout=120), run_dir)
        self.versions, self.weights, self.error = versions, {}, None

    def run(self) -> None:
        from safetensors.torch import load_file

        try:
            for v in self.versions:
                path = self.transport.receive(v, timeout=120)
                self.weights[v] = load_file(str(Path(path) / "model.safetensors"))
        except Exception as exc:  # surfaced by the test
            self.error = exc


def make_sft_config(tmp_path: Path, model: Path, data_path: Path, **overrides):
    """An SFTConfig for the tiny model, with monitors off unless given."""
    from prl.config.roots import SFTConfig

    raw = {
        "output_dir": str(tmp_path / "outputs"),
        "run": {"name": "t"},
        "model": {"name": str(model)},
        "renderer": {"name": "qwen3"},
        "data": {"name": str(data_path), "seq_len": 64, "batch_size": 4, "micro_batch_size": 1, "shuffle": True},
        "optim": {"lr": 3e-3},
        "max_steps": 4,
    }
    cfg = SFTConfig.model_validate(_merged(raw, overrides))
    return _only_listed_monitors(cfg, overrides.get("monitors", {}))
