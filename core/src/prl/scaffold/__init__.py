"""Scaffold a new plugin distribution from the templates shipped in this package.

``scaffold("algorithm", "my-thing", out)`` writes a working distribution to ``out``::

    pyproject.toml                    prl-algo-my-thing, entry point algo-my-thing in group prl
    README.md                         what the code does and what to edit
    src/prl_algo_my_thing/__init__.py
    src/prl_algo_my_thing/plugin.py   the @hookimpl returning the class
    src/prl_algo_my_thing/algorithm.py  the implementation, tag type = "my_thing"
    tests/conftest.py, tests/test_my_thing.py

Templates are files under ``templates/`` with ``{{placeholder}}`` fields: ``common/`` holds
what every kind shares, ``<kind>/`` the implementation, its test and its README section.
The entry-point name is the distribution name without ``prl-``: unlike the bare tag, it
cannot collide with another kind's plugin of the same name (the plugin manager loads one
entry point per name).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from prl import __version__
from prl.scaffold.kinds import ALIASES, TEMPLATES, KindTemplate

NAME_RE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
# Longer names would push generated lines past the 120-column limit.
MAX_NAME = 32
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class ScaffoldError(ValueError):
    """A usage error: the message is one line naming the argument."""


@dataclass(frozen=True)
class Names:
    """Every spelling of one plugin's name."""

    name: str  # my-thing
    template: KindTemplate

    @property
    def ident(self) -> str:
        return self.name.replace("-", "_")

    @property
    def dist(self) -> str:
        return f"prl-{self.template.prefix}-{self.name}"

    @property
    def package(self) -> str:
        return self.dist.replace("-", "_")

    @property
    def entry(self) -> str:
        return self.dist.removeprefix("prl-")

    @property
    def tag(self) -> str:
        return self.ident if self.template.underscore_tag else self.name

    @property
    def cls(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("-")) + self.template.suffix


def resolve_kind(kind: str) -> KindTemplate:
    """The template of ``kind``, spelled as in :data:`prl.plugins.KINDS` or singular."""
    key = ALIASES.get(kind, kind.replace("-", "_"))
    if key not in TEMPLATES:
        choices = ", ".join(sorted(ALIASES))
        raise ScaffoldError(f"KIND '{kind}' is not a plugin kind; choose one of: {choices}")
    return TEMPLATES[key]


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise ScaffoldError(
            f"NAME '{name}' must be lowercase letters, digits and single hyphens, "
            "starting with a letter (e.g. my-thing)"
        )
    if len(name) > MAX_NAME:
        raise ScaffoldError(f"NAME '{name}' is longer than {MAX_NAME} characters")
    if keyword.iskeyword(name.replace("-", "_")):
        raise ScaffoldError(f"NAME '{name}' is a Python keyword; pick another name")
    return name


def core_requirement(version: str = __version__) -> str:
    """prl-core from this minor version up to the next: 0.x minors may change contracts."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return f"prl-core>={major}.{minor},<{major}.{minor + 1}"


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def fields(names: Names) -> dict[str, str]:
    """The values of every ``{{placeholder}}`` in the templates."""
    t = names.template
    extras = "".join(f"{group} = {_toml_list(list(reqs))}\n" for group, reqs in t.extras)
    return {
        "name": names.name,
        "ident": names.ident,
        "dist": names.dist,
        "package": names.package,
        "entry": names.entry,
        "tag": names.tag,
        "cls": names.cls,
        "kind": t.kind,
        "alias": t.alias,
        "label": t.alias.replace("-", " "),
        "tag_attr": t.tag_attr,
        "module": t.module,
        "contract": t.contract,
        "hook": f"prl_register_{t.kind}",
        "summary": t.summary,
        "selects": t.selects.format(tag=names.tag),
        "dependencies": _toml_list([core_requirement(), *t.dependencies]),
        "optional": f"\n[project.optional-dependencies]\n{extras}" if extras else "",
    }


def render(text: str, values: dict[str, str], where: str) -> str:
    def sub(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"template {where}: unknown placeholder {{{{{key}}}}}")
        return values[key]

    return _PLACEHOLDER.sub(sub, text)


def _template(*parts: str) -> str:
    return resources.files("prl.scaffold").joinpath("templates", *parts).read_text(encoding="utf-8")


def plan(names: Names) -> dict[str, str]:
    """Relative path to file content, for every file of the new distribution."""
    values = fields(names)
    kind = names.template.kind
    values["about"] = render(_template(kind, "about.md.tmpl"), values, f"{kind}/about.md.tmpl").strip()
    pkg = f"src/{names.package}"
    sources = {
        "pyproject.toml": ("common", "pyproject.toml.tmpl"),
        "README.md": ("common", "README.md.tmpl"),
        f"{pkg}/__init__.py": ("common", "__init__.py.tmpl"),
        f"{pkg}/plugin.py": ("common", "plugin.py.tmpl"),
        f"{pkg}/{names.template.module}.py": (kind, "impl.py.tmpl"),
        "tests/conftest.py": ("common", "conftest.py.tmpl"),
        f"tests/test_{names.ident}.py": (kind, "test.py.tmpl"),
    }
    return {path: render(_template(*src), values, "/".join(src)) for path, src in sources.items()}


def scaffold(kind: str, name: str, out: Path | None = None) -> tuple[Names, Path, list[str]]:
    """Write the distribution for ``kind``/``name`` into ``out`` (default ``./<dist>``).

    Returns the names, the target directory and the files written. Raises
    :class:`ScaffoldError` for a bad kind or name, or a target that is a non-empty directory.
    """
    names = Names(check_name(name), resolve_kind(kind))
    target = Path(out) if out is not None else Path(names.dist)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldError(f"--out '{target}' already exists and is not empty; pick another directory")
    files = plan(names)
    for rel, text in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return names, target, sorted(files)
