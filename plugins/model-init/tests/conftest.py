from __future__ import annotations

from pathlib import Path

import pytest
from prl_model_init import make_model


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / "tiny", preset="tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_moe_dir(tmp_path_factory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", preset="tiny-moe", seed=0)
