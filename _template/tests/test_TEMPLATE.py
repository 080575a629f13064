"""The plugin registers under its tag and scores a group as documented."""

import pytest
from prl_TEMPLATE import plugin
from pydantic import ValidationError

from prl.plugins import get_registry
from prl.types import Branch, Trace


@pytest.fixture
def registry(register_plugin):
    # Installed (pip install -e .), the entry point registers it; otherwise register inline.
    if "TEMPLATE" not in get_registry().classes("algorithms"):
        register_plugin(plugin, name="TEMPLATE-test")
    return get_registry()


def test_registered_under_its_tag(registry):
    cls = registry.get("algorithms", "TEMPLATE")
    assert cls is plugin.TemplateAlgorithm
    assert cls.Config().type == "TEMPLATE"


def test_sampled_tokens_get_reward_minus_baseline(registry):
    cls = registry.get("algorithms", "TEMPLATE")
    trace = Trace("t", "task", "env", [Branch([1, 2, 3], [False, True, True], [0.0] * 3)], reward=1.0)
    cls(cls.Config(baseline=0.25)).score_group([trace])
    branch = trace.branches[0]
    assert branch.advantages == [0.0, 0.75, 0.75]
    assert branch.rl_weights == [0.0, 1.0, 1.0]
    assert branch.ce_weights == branch.ref_kl_weights == [0.0, 0.0, 0.0]


def test_unknown_config_keys_are_rejected():
    with pytest.raises(ValidationError, match="baselin"):
        plugin.TemplateAlgorithm.Config(baselin=1.0)
