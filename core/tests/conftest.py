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
        snapshot = cache / f"models--{name.replace('/', '--')}" / "snapshots" / "0"
        snapshot.mkdir(parents=True, exist_ok=True)
        # mapped to a renderer, as a real model must be for the default renderer `auto`
        (snapshot / "config.json").write_text('{"prl_renderer": "default"}' if mapped else "{}")

    for name in ("Qwen/Qwen3-0.6B", "org/Tiny-Model"):
        add(name)
    return add
