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
        for name in names:
            unregister_inline(name)


@pytest.fixture(autouse=True)
def _restore_prl_environment():
    """A command run in-process (typer's runner) exports PRL_RUN_* / PRL_ATTEMPT_* for its
    children; restore them so one test's run directory never leaks into the next test."""
    import os

    saved = {k: v for k, v in os.environ.items() if k.startswith("PRL_")}
    yield
    for key in [k for k in os.environ if k.startswith("PRL_") and k not in saved]:
        del os.environ[key]
    os.environ.update(saved)
