"""Plugin manager: tags, duplicates, disabling, `prl plugins`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import ClassVar, Literal

import pytest

from prl import hookimpl
from prl.config.components import TrainerConfig
from prl.contracts import LossConfig, Monitor, MonitorConfig
from prl.plugins import LOSSES, PluginError, get_registry
from prl.testing.fakes import DuplicatePlugin, FakeLoss, FakePlugin


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


class _DefaultLoss(FakeLoss):
    """A second loss that claims to be the default."""

    type: ClassVar[str] = "greedy_default"
    is_default: ClassVar[bool] = True

    class Config(LossConfig):
        type: Literal["greedy_default"] = "greedy_default"
        scale: float = 1.0


class _DefaultsPlugin:
    @hookimpl
    def prl_register_losses(self):
        return [_DefaultLoss]


def test_the_default_is_declared_by_the_plugin(fake_plugins, register_plugin):
    assert get_registry().default_tag(LOSSES) != "greedy_default"
    register_plugin(_DefaultsPlugin(), "defaults-plugin", "prl-greedy-dist")
    installed = get_registry().classes(LOSSES)
    if not any(getattr(cls, "is_default", False) for tag, cls in installed.items() if tag != "greedy_default"):
        # the only default: a config that leaves the tag out gets it
        assert get_registry().default_tag(LOSSES) == "greedy_default"
        assert TrainerConfig().loss.type == "greedy_default"
    else:
        with pytest.raises(PluginError, match="prl-greedy-dist.*both declare themselves the default"):
            get_registry().default_tag(LOSSES)


def test_a_registered_class_must_subclass_its_contract(register_plugin):
    class NotALoss:
        type = "not_a_loss"

    class Bad:
        @hookimpl
        def prl_register_losses(self):
            return [NotALoss]

    register_plugin(Bad(), "bad-plugin", "prl-bad-dist")
    with pytest.raises(PluginError, match="prl-bad-dist: .*NotALoss.* does not subclass prl.contracts.loss.Loss"):
        get_registry().classes(LOSSES)


def test_config_build_constructs_the_owning_plugin():
    loss = _DefaultLoss.Config(scale=2.0).build()
    assert isinstance(loss, _DefaultLoss) and loss.config.scale == 2.0
    assert isinstance(FakeLoss.Config().build(), FakeLoss)  # typed: LossConfig.build() -> Loss


def test_build_rejects_runtime_arguments_that_are_config_fields():
    monitor_cfg = _FieldMonitor.Config()
    with pytest.raises(TypeError, match="run_dir are config fields"):
        monitor_cfg.build(run_dir="/tmp", producer="orch")


def test_a_config_that_no_plugin_nests_cannot_build():
    class Loose(LossConfig):
        type: Literal["loose"] = "loose"

    with pytest.raises(TypeError, match="Loose is not the Config of any plugin class"):
        Loose().build()


class _FieldMonitor(Monitor):
    key: ClassVar[str] = "field_monitor"

    class Config(MonitorConfig):
        run_dir: str = "x"

    def log(self, metrics, step):  # pragma: no cover - build() refuses before construction
        pass


def test_unregistering_removes_every_plugin_before_the_configs_are_rebuilt(monkeypatch):
    import prl.plugins as plugins

    plugins.register_inline(FakePlugin(), "fake-first", "prl-fake-first")
    plugins.register_inline(_DefaultsPlugin(), "defaults-second", "prl-greedy-second")
    seen = []
    monkeypatch.setattr(plugins, "rebuild_configs", lambda: seen.append(sorted(get_registry().plugins)))
    plugins.unregister_inline("defaults-second", "fake-first")
    # one rebuild, and it saw neither: a rebuild in between could meet the two conflicting
    # defaults (ipo and greedy_default), fail, and leave the second one registered
    assert len(seen) == 1 and not {"fake-first", "defaults-second"} & set(seen[0])
    monkeypatch.undo()
    plugins.rebuild_configs()
    assert "greedy_default" not in get_registry().classes(LOSSES)
