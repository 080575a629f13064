"""Docs stay in step with the code: every hook documented, the generated pages
(docs/hooks.md, docs/plugins.md, docs/reference/config.md) current, the mkdocs site builds
with ``--strict``, and docstrings cite docs pages that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


def test_config_reference_is_up_to_date():
    from prl.docgen_config import render_config

    current = (ROOT / "docs" / "reference" / "config.md").read_text()
    assert current == render_config(), "docs/reference/config.md is stale; run: python -m prl.docgen --config"


def test_mkdocs_builds_strict_without_warnings(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert proc.returncode == 0 and not warnings, (
        "python -m mkdocs build --strict failed (a new page must also be listed in the nav of mkdocs.yml):\n"
        + "\n".join(warnings or output.splitlines()[-20:])
    )


# Python sources of the repository (virtual environments, build output and runs pruned).
_SKIP_DIRS = {".venv", "venv", "build", "dist", "site", "outputs", "node_modules", "__pycache__"}
_DOCS_CITE = re.compile(r"\bdocs/([\w./-]+?\.md)\b")
# Citations of the design spec, which is not part of the repository: spec/<file>.md,
# "spec ``file.md``", "(spec §N", "(spec: ...", "the spec's", and the spec's file names.
_SPEC_FILES = "cli-and-config|rl-loop|runs-and-artifacts|sft-eval-dashboard"
_SPEC_CITE = re.compile(
    # "(spec: Type)" / "(spec: Type, ..." is a parameter annotation, not a citation.
    rf"\bspec/|\bspec\s+`*[\w.-]+\.md|\bspec\s*§|\(spec(?:[\s§]|:(?!\s*[A-Z]\w*[,)\]])|$)|\bspec's\b"
    rf"|(?<![\w/-])(?:{_SPEC_FILES})(?:\.md)?\b"
)


def _python_files() -> list[Path]:
    found = []
    for base, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".") and not d.endswith(".egg-info")]
        found += [Path(base) / f for f in files if f.endswith(".py")]
    return found


def test_docstrings_cite_docs_pages_that_exist():
    missing, spec = [], []
    for path in _python_files():
        if path == Path(__file__).resolve():
            continue
        rel = path.relative_to(ROOT)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            missing += [f"{rel}:{number}: docs/{page}" for page in _DOCS_CITE.findall(line)
                        if not (ROOT / "docs" / page).is_file()]  # fmt: skip
            if _SPEC_CITE.search(line):
                spec.append(f"{rel}:{number}: {line.strip()}")
    assert not missing, "cited docs pages that do not exist:\n" + "\n".join(missing)
    assert not spec, "cite the docs page (``docs/<page>.md``) instead of the spec:\n" + "\n".join(spec)
