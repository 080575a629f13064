"""Docs stay in step with the code: every hook documented, docs/hooks.md regenerated."""

from __future__ import annotations

from pathlib import Path

import pluggy

from prl import hookspecs
from prl.docgen import hook_functions, render

ROOT = Path(__file__).resolve().parents[1]


def test_every_hook_is_in_docs():
    text = (ROOT / "docs" / "hooks.md").read_text()
    pm = pluggy.PluginManager("prl")
    pm.add_hookspecs(hookspecs)
    names = [name for name in dir(pm.hook) if name.startswith("prl_")]
    assert names, "no hooks found"
    for name in names:
        spec = getattr(pm.hook, name).spec
        assert f"## `{name}(" in text, f"{name} missing from docs/hooks.md"
        for arg in spec.argnames:
            assert arg in text.split(f"## `{name}(")[1].split("\n")[0], f"{name}: argument {arg} not documented"


def test_every_hook_has_a_docstring_with_returns_or_args():
    for fn in hook_functions():
        doc = fn.__doc__ or ""
        assert "Returns:" in doc or "Args:" in doc, fn.__name__


def test_hooks_md_is_up_to_date():
    assert (ROOT / "docs" / "hooks.md").read_text() == render(), "run: python -m prl.docgen docs/hooks.md"


def test_every_registered_tag_is_documented():
    from prl.plugins import KINDS, get_registry

    text = (ROOT / "docs" / "plugins.md").read_text()
    registry = get_registry()
    missing = []
    for kind in KINDS:
        for tag in registry.classes(kind):
            dist = registry.origin(kind, tag)
            if dist.startswith("prl-") and f"| `{tag}` | {dist} |" not in text:
                missing.append(f"{kind}:{tag} ({dist})")
    assert not missing, "run: python -m prl.docgen --plugins docs/plugins.md; missing " + ", ".join(missing)
