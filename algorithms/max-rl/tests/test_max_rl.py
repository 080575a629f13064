"""max_rl: A = (r - mean) / mean, 0 when the mean is not positive."""

import pytest
from prl_algo_max_rl import MaxRL

from prl.plugins import get_registry
from prl.types import Branch, Trace


def _group(rewards):
    return [
        Trace(f"t{i}", "task", "env", [Branch([1, 2, 3], [False, True, True], [-1.0] * 3)], reward=r)
        for i, r in enumerate(rewards)
    ]


def _advantages(rewards):
    group = _group(rewards)
    MaxRL(MaxRL.Config()).score_group(group)
    return [t.branches[0].advantages[1] for t in group], group


def test_registered_as_max_rl():
    assert get_registry().get("algorithms", "max_rl") is MaxRL


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ([1.0, 0.0, 0.0, 1.0], [1.0, -1.0, -1.0, 1.0]),  # mean .5
        ([1.0, 0.0, 0.0, 0.0], [3.0, -1.0, -1.0, -1.0]),  # mean .25: the rare success counts 3x
        ([2.0, 4.0], [-1 / 3, 1 / 3]),  # mean 3
        ([0.0, 0.0], [0.0, 0.0]),  # mean 0
        ([1.0, -3.0], [0.0, 0.0]),  # mean -1
    ],
)
def test_advantage_by_hand(rewards, expected):
    advantages, _ = _advantages(rewards)
    assert advantages == pytest.approx(expected)


def test_token_layout():
    _, group = _advantages([1.0, 0.0])
    branch = group[0].branches[0]
    assert branch.advantages == [0.0, 1.0, 1.0]
    assert branch.rl_weights == [0.0, 1.0, 1.0]
    assert branch.ce_weights == branch.ref_kl_weights == [0.0, 0.0, 0.0]


def test_importing_the_plugin_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, prl_algo_max_rl.plugin; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
