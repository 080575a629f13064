"""Plugin manager: tags, duplicates, disabling, `prl plugins`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from prl.plugins import PluginError, get_registry
from prl.testing.fakes import DuplicatePlugin


def test_classes_keyed_by_tag(fake_plugins):
    losses = get_registry().classes("losses")
    assert losses["fake_loss"].__name__ == "FakeLoss"
    assert get_registry().origin("losses", "fake_loss") == "prl-fake-dist"


def test_duplicate_tag_names_both_distributions(fake_plugins, register_plugin):
    register_plugin(DuplicatePlugin(), "dup-plugin", "prl-dup-dist")
    with pytest.raises(PluginError) as exc:
        get_registry().classes("losses")
    assert "prl-fake-dist" in str(exc.value) and "prl-dup-dist" in str(exc.value)
    assert "'fake_loss'" in str(exc.value)


def test_missing_tag_names_providing_distribution():
    with pytest.raises(PluginError, match="no loss 'definitely-missing' is installed"):
        get_registry().get("losses", "definitely-missing")


def _plugins_json(env: dict) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "prl", "plugins", "--json"], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout)


def test_prl_plugins_json_and_disable():
    rows = _plugins_json(dict(os.environ))
    if not rows:
        pytest.skip("no plugins installed in this environment")
    victim = rows[0]
    assert victim["version"] and victim["distribution"]
    env = dict(os.environ, PRL_DISABLE_PLUGINS=victim["distribution"])
    names = {r["distribution"] for r in _plugins_json(env)}
    assert victim["distribution"] not in names
    assert len(names) == len(rows) - 1


def test_prl_plugins_table_lists_registrations():
    out = subprocess.run([sys.executable, "-m", "prl", "plugins"], capture_output=True, text=True, check=True)
    assert "distribution" in out.stdout
