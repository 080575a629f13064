"""debug: the configured constant advantage on every sampled token, rewards ignored."""

import pytest
from prl_algo_debug import Debug
from pydantic import ValidationError

from prl.plugins import get_registry
from prl.types import Branch, Trace


def _trace(reward):
    branches = [Branch([1, 2, 3], [False, True, True], [-1.0] * 3), Branch([4, 5], [True, False], [-1.0] * 2)]
    return Trace("t", "task", "env", branches, reward=reward)


def test_registered_as_debug_with_advantage_one():
    assert get_registry().get("algorithms", "debug") is Debug
    assert Debug.Config().advantage == 1.0


@pytest.mark.parametrize("advantage", [1.0, -0.5])
def test_constant_advantage_whatever_the_reward(advantage):
    group = [_trace(0.0), _trace(1.0), _trace(0.3)]
    Debug(Debug.Config(advantage=advantage)).score_group(group)
    for trace in group:
        first, second = trace.branches
        assert first.advantages == [0.0, advantage, advantage]
        assert second.advantages == [advantage, 0.0]
        assert first.rl_weights == [0.0, 1.0, 1.0] and second.rl_weights == [1.0, 0.0]
        assert first.ce_weights == first.ref_kl_weights == [0.0] * 3


def test_zero_advantage_is_rejected_by_name():
    with pytest.raises(ValidationError, match="advantage"):
        Debug.Config(advantage=0.0)


def test_importing_the_plugin_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, prl_algo_debug.plugin; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
