from __future__ import annotations

import pytest

from prl.testing.fakes import FakePlugin


@pytest.fixture
def fake_plugins(register_plugin):
    """Fake loss/taskset plugins registered for one test under the dist 'prl-fake-dist'."""
    register_plugin(FakePlugin(), "fake-plugin", "prl-fake-dist")
    yield


@pytest.fixture
def hf_cache(tmp_path_factory, monkeypatch):
    """A Hugging Face hub cache holding the models these tests name (a config.json each):
    commands check that a configured model exists before anything starts. Returns a
    function that caches one more model name."""
    cache = tmp_path_factory.mktemp("hf-hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    def add(name: str, mapped: bool = True) -> None:
        repo = cache / f"models--{name.replace('/', '--')}"
        snapshot = repo / "snapshots" / "0"
        snapshot.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text("0")  # the branch's commit, as huggingface_hub records it
        # mapped to a renderer, as a real model must be for the default renderer `auto`
        (snapshot / "config.json").write_text('{"prl_renderer": "default"}' if mapped else "{}")

    for name in ("Qwen/Qwen3-0.6B", "org/Tiny-Model"):
        add(name)
    # prl sft's default dataset, so that commands given no data.name resolve offline too.
    data = cache / "datasets--PrimeIntellect--Reverse-Text-SFT"
    (data / "snapshots" / "0").mkdir(parents=True)
    (data / "snapshots" / "0" / "README.md").write_text("reverse text\n")
    (data / "refs").mkdir()
    (data / "refs" / "main").write_text("0")
    return add
