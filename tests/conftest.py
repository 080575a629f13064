"""Fixtures of the cross-distribution tests."""

from __future__ import annotations

from pathlib import Path

import pytest

HUB_MODEL, HUB_DATA = "prl-test/tiny", "prl-test/reverse"


@pytest.fixture(scope="session")
def hub_repos(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny model's and a tiny reverse-text dataset's repo contents."""
    pytest.importorskip("prl_model_init")
    from prl_model_init import make_model

    from prl.testing.hub_setup import tiny_dataset_dir

    root = tmp_path_factory.mktemp("repos")
    return make_model(root / "model", preset="tiny", seed=0), tiny_dataset_dir(root / "data")


@pytest.fixture
def hub(local_hub, hub_repos):
    """The local hub serving them as ``prl-test/tiny`` and dataset ``prl-test/reverse``,
    which exist nowhere else: a test that loads them went through the hub."""
    local_hub.add_model(HUB_MODEL, hub_repos[0])
    local_hub.add_dataset(HUB_DATA, hub_repos[1])
    return local_hub


@pytest.fixture(scope="session")
def reverse_text_sft():
    """Writes ``n`` SFT rows (prompt and answer) made from the reverse-text taskset's train
    split to a jsonl file and returns its path: SFT data on the RL task itself."""
    pytest.importorskip("prl_tasks_builtin")

    def write(path: Path, n: int) -> Path:
        import json

        from prl_tasks_builtin.reverse_text import ReverseText

        tasks = list(ReverseText(ReverseText.Config()).tasks("train"))[:n]
        path.write_text("".join(json.dumps({"prompt": t.prompt, "completion": t.data["answer"]}) + "\n" for t in tasks))
        return path

    return write
