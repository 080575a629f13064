"""echo: GRPO advantages on sampled tokens, ce weight alpha on env tokens of listed roles."""

import pytest
from prl_algo_echo import Echo
from pydantic import ValidationError

from prl.plugins import get_registry
from prl.types import Branch, Trace

# system prompt (2), assistant call (2 sampled + 1 template), tool output (2), user (1), answer (1)
ROLES = ["system", "system", "assistant", "assistant", "template", "tool", "tool", "user", "assistant"]
SAMPLED = [0, 0, 1, 1, 0, 0, 0, 0, 1]


def _trace(name, reward, roles=ROLES):
    mask = [bool(s) for s in SAMPLED]
    branch = Branch(list(range(len(mask))), mask, [-1.0] * len(mask), roles=roles)
    return Trace(name, "task", "env", [branch], reward=reward)


def _score(group, **cfg):
    Echo(Echo.Config(**cfg)).score_group(group)
    return group


def test_registered_as_echo_not_default():
    assert get_registry().get("algorithms", "echo") is Echo
    assert get_registry().get("algorithms", "grpo").is_default and not Echo.is_default
    cfg = Echo.Config()
    assert {role: r.alpha for role, r in cfg.roles.items()} == {"tool": 0.1} and cfg.filter is None


def test_grpo_on_actions_and_ce_on_tool_tokens_by_default():
    a, b = _score([_trace("a", 1.0), _trace("b", 0.0)])
    branch = a.branches[0]
    assert branch.advantages == [0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5]
    assert branch.rl_weights == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert branch.ce_weights == [0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.1, 0.0, 0.0]
    assert branch.ref_kl_weights == [0.0] * 9
    assert b.branches[0].advantages[2] == -0.5
    assert b.branches[0].ce_weights == branch.ce_weights  # ce does not depend on reward


def test_setting_a_role_replaces_the_table():
    (a,) = _score([_trace("a", 1.0)], roles={"user": {"alpha": 0.5}, "system": {"alpha": 0.25}})
    assert a.branches[0].ce_weights == [0.25, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0]


def test_sampled_tokens_never_get_ce_even_with_the_assistant_role_listed():
    (a,) = _score([_trace("a", 1.0)], roles={"assistant": {"alpha": 1.0}})
    assert a.branches[0].ce_weights == [0.0] * 9


def test_a_branch_without_roles_gets_no_ce():
    (a,) = _score([_trace("a", 1.0, roles=None)])
    assert a.branches[0].ce_weights == [0.0] * 9


def test_filter_keeps_branches_out_of_ce(tmp_path):
    f = tmp_path / "keep.py"
    f.write_text("def winners(trace, branch):\n    return trace.reward > 0.5\n")
    a, b = _score([_trace("a", 1.0), _trace("b", 0.0)], filter=f"{f}:winners")
    assert a.branches[0].ce_weights[5:7] == [0.1, 0.1]
    assert b.branches[0].ce_weights == [0.0] * 9
    assert b.branches[0].advantages[2] == -0.5  # the rl signal is untouched


def test_bad_settings_are_rejected_by_name(tmp_path):
    with pytest.raises(ValidationError, match="alpha"):
        Echo.Config(roles={"tool": {"alpha": -1.0}})
    with pytest.raises(ValidationError, match="filter"):
        Echo.Config(filter="no-colon-or-dot")
    with pytest.raises(ValueError, match="does not exist"):
        Echo(Echo.Config(filter=f"{tmp_path / 'missing.py'}:fn"))


def test_importing_the_plugin_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, prl_algo_echo.plugin; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
