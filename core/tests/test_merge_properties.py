"""Property tests: deep merge and source precedence."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from prl.config.argv import ParsedArgs
from prl.config.files import deep_merge
from prl.config.resolve import merge_sources

keys = st.sampled_from(list("abcde"))
leaves = st.one_of(
    st.integers(-5, 5), st.text("xyz", max_size=3), st.booleans(), st.lists(st.integers(0, 3), max_size=3)
)
trees = st.recursive(leaves, lambda inner: st.dictionaries(keys, inner, max_size=4), max_leaves=12)
dicts = st.dictionaries(keys, trees, max_size=4)


def leaf_paths(tree, prefix=()):
    if isinstance(tree, dict):  # an empty table merges into nothing: not a leaf
        for k, v in tree.items():
            yield from leaf_paths(v, prefix + (k,))
    else:
        yield prefix, tree


def get(tree, path):
    for p in path:
        tree = tree[p]
    return tree


@given(dicts, dicts)
def test_override_leaves_win(base, override):
    merged = deep_merge(base, override)
    for path, value in leaf_paths(override):
        if path:
            assert get(merged, path) == value


@given(dicts, dicts)
def test_base_leaves_kept_unless_overridden(base, override):
    merged = deep_merge(base, override)
    for path, value in leaf_paths(base):
        if not path:
            continue
        shadowed = any(
            isinstance(get_or_none(override, path[:i]), (list, int, str, bool))
            or (i == len(path) and get_or_none(override, path) is not None)
            for i in range(1, len(path) + 1)
        )
        if not shadowed:
            assert get(merged, path) == value


def get_or_none(tree, path):
    for p in path:
        if not isinstance(tree, dict) or p not in tree:
            return None
        tree = tree[p]
    return tree


@given(dicts, dicts)
def test_applying_the_same_override_twice_changes_nothing(a, b):
    once = deep_merge(a, b)
    assert deep_merge(once, b) == once


@given(dicts)
def test_merge_with_empty_is_identity_and_inputs_untouched(a):
    snapshot = json.dumps(a, sort_keys=True)
    assert deep_merge({}, a) == a and deep_merge(a, {}) == a
    assert json.dumps(a, sort_keys=True) == snapshot


@given(st.lists(st.integers(0, 3), max_size=4), st.lists(st.integers(0, 3), max_size=4))
def test_lists_are_replaced_whole(x, y):
    assert deep_merge({"l": x}, {"l": y}) == {"l": y}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.one_of(st.none(), st.integers(1, 9)))
def test_precedence_files_left_to_right_then_cli(tmp_path_factory, first, second, cli):
    d = tmp_path_factory.mktemp("prec")
    (d / "a.toml").write_text(f"x = {first}\n[s]\ny = {first}\n")
    (d / "b.toml").write_text(f"x = {second}\n")
    parsed = ParsedArgs(root_files=[str(d / "a.toml"), str(d / "b.toml")], overrides={} if cli is None else {"x": cli})
    merged = merge_sources(parsed)
    assert merged["x"] == (second if cli is None else cli)
    assert merged["s"]["y"] == first
