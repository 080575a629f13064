from __future__ import annotations

import pytest

from prl.testing.fakes import FakePlugin


@pytest.fixture
def fake_plugins(register_plugin):
    """Fake loss/taskset plugins registered for one test under the dist 'prl-fake-dist'."""
    register_plugin(FakePlugin(), "fake-plugin", "prl-fake-dist")
    yield
