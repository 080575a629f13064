from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from prl.plugins import get_registry


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny", preset="tiny", seed=0)


@pytest.fixture
def unmarked_copy():
    return _unmarked_copy


@pytest.fixture
def make():
    return _make


def _unmarked_copy(src: Path, dst: Path) -> Path:
    """The tiny tokenizer without its prl_renderer marker, at ``dst``."""
    dst.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(src / name, dst / name)
    cfg = json.loads((dst / "tokenizer_config.json").read_text())
    cfg.pop("prl_renderer")
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg))
    return dst


def _make(name: str, tokenizer, **fields):
    cls = get_registry().get("renderers", name)
    return cls(cls.Config(name=name, **fields), str(tokenizer))
