"""pytest plugin shipped with prl-core (fixtures for plugin authors)."""

from __future__ import annotations

import pytest


@pytest.fixture
def register_plugin():
    """Register a module/object as a prl plugin for one test; unregistered afterwards."""
    from prl.plugins import register_inline, unregister_inline

    names: list[str] = []

    def _register(obj, name: str = "inline-test-plugin", dist: str = "inline") -> None:
        names.append(name)  # before registering: a failing rebuild must still be undone
        register_inline(obj, name, dist)

    try:
        yield _register
    finally:
        if names:
            unregister_inline(*reversed(names))


@pytest.fixture
def local_hub(tmp_path_factory, monkeypatch):
    """A :class:`prl.testing.hub.LocalHub` serving nothing yet (``add_model`` /
    ``add_dataset`` to fill it), with ``HF_ENDPOINT`` pointing at it and empty caches under
    a fresh ``HF_HOME``, for this process and the subprocesses it starts; no token is set."""
    from prl.testing.hub import LocalHub
    from prl.testing.hub_setup import forget_filesystems, use_local_hub

    hub = LocalHub().start()
    try:
        use_local_hub(hub, monkeypatch, tmp_path_factory.mktemp("hf-home"))
        yield hub
    finally:
        hub.down()
        forget_filesystems()


@pytest.fixture
def hf_cache(tmp_path_factory, monkeypatch):
    """A Hugging Face hub cache (``HF_HUB_CACHE``) in which prl's default model
    ``Qwen/Qwen3-0.6B``, ``org/Tiny-Model`` and the default SFT dataset look cached (a
    config.json each, mapped to the ``default`` renderer), so that commands whose models a
    test never loads resolve without a hub. Returns a function that caches one more model
    name (``mapped=False``: with no renderer mapping)."""
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


# Exported by commands run in-process: PRL_* for their children, and HF_HUB_OFFLINE once a
# command that loads weights here has fetched its models (prl.hub.read_cache_only).
_EXPORTED = ("PRL_", "HF_HUB_OFFLINE")


def _prl_environment() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k.startswith(_EXPORTED)}


def _restore(saved: dict[str, str]) -> None:
    import os
    import sys

    for key in [k for k in os.environ if k.startswith(_EXPORTED) and k not in saved]:
        del os.environ[key]
    os.environ.update(saved)
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # read_cache_only also switches the imported client off
        constants.HF_HUB_OFFLINE = saved.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


@pytest.fixture(autouse=True, scope="module")
def _restore_prl_environment_per_module():
    """The same at module boundaries: a module-scoped fixture that runs a command in-process
    exports before any test's own snapshot is taken, and would otherwise leak into every
    later module (e.g. an env server logging under another run's PRL_ATTEMPT_LOG_DIR)."""
    saved = _prl_environment()
    yield
    _restore(saved)


@pytest.fixture(autouse=True)
def _restore_prl_environment():
    """A command run in-process (typer's runner) exports PRL_RUN_* / PRL_ATTEMPT_* for its
    children; restore them so one test's run directory never leaks into the next test."""
    saved = _prl_environment()
    yield
    _restore(saved)
