"""Every installed plugin class keeps the contract: tag, nested Config, ``Config.build``."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest

from prl.contracts import WeightTransport, WeightTransportConfig
from prl.plugins import KINDS, get_registry
from prl.testing import assert_plugin_contract
from prl.testing.fakes import FakeLoss


def _installed() -> list[tuple[str, str, type]]:
    return [(kind, tag, cls) for kind in KINDS for tag, cls in sorted(get_registry().classes(kind).items())]


@pytest.mark.parametrize(("kind", "tag", "cls"), _installed(), ids=lambda v: v if isinstance(v, str) else "")
def test_installed_plugin_keeps_the_contract(kind, tag, cls):
    assert_plugin_contract(cls)


def test_a_broken_plugin_is_named(register_plugin):
    class NoConfig(FakeLoss):
        type = "no_config"

    with pytest.raises(AssertionError, match="NoConfig must nest its own `class Config"):
        assert_plugin_contract(NoConfig, registered=False)


def test_an_unregistered_plugin_is_caught():
    with pytest.raises(AssertionError, match="loss type 'fake_loss' is registered as None"):
        assert_plugin_contract(FakeLoss)


def test_an_override_that_drops_a_contract_argument_is_named():
    # Core's weight follower calls receive(version, timeout, load): an override written
    # from an older contract would fail only in a real run, after start-up.
    class OldReceive(WeightTransport):
        type: ClassVar[str] = "old_receive"

        class Config(WeightTransportConfig):
            type: Literal["old_receive"] = "old_receive"

        def publish(self, state_dict, version):
            pass

        def receive(self, version, timeout):
            return None

    with pytest.raises(AssertionError, match=r"OldReceive.receive\(self, version, timeout\) does not take the call"):
        assert_plugin_contract(OldReceive, registered=False)
