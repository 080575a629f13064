"""Keep the `prl` distribution and the workspace members in lockstep (`make packs`).

Reads packages/prl/packs.toml and every member the workspace root names under
``[tool.prl.workspace] members``, then:

* writes packages/prl/pyproject.toml: the default dependencies and one extra per pack, each
  member required within the lockstep minor series (">=0.1.0,<0.2");
* sets every member's ``version`` to the lockstep version and rewrites the specifier of each
  requirement on another member to the same range.

``--check`` changes nothing and exits 1 naming the stale files (the fast test runs it).
Members are discovered, so a new one needs no edit here: an opt-in pack names it in
packs.toml, or discovery places it in `orchestrator` or `trainer` by its dependencies.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PACKS = ROOT / "packages" / "prl" / "packs.toml"
TARGET = ROOT / "packages" / "prl" / "pyproject.toml"
CATALOGUE = ROOT / "packages" / "prl" / "prl_catalogue.py"
AUTO = ("orchestrator", "trainer")  # packs filled by discovery (see packs.toml)

# A quoted requirement on a prl-* distribution: "prl-core", "prl-x[extra]>=0.1", ...
_REQ = re.compile(r'"(prl-[a-z0-9-]+)(\[[a-z0-9_,-]+\])?(\s*[<>=~!][^";]*)?"')


@dataclass
class Member:
    name: str
    folder: str
    requires: list[Requirement] = field(default_factory=list)
    extras: set[str] = field(default_factory=set)


def discover(root: Path = ROOT) -> dict[str, Member]:
    """Every workspace member, by canonical distribution name."""
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["prl"]["workspace"]["members"]
    members: dict[str, Member] = {}
    for pattern in patterns:
        for path in sorted(root.glob(f"{pattern}/pyproject.toml")):
            project = tomllib.loads(path.read_text())["project"]
            folder = path.parent.relative_to(root).as_posix()
            reqs = [Requirement(r) for r in project.get("dependencies", [])]
            extras = set(project.get("optional-dependencies", {}))
            members[canonicalize_name(project["name"])] = Member(project["name"], folder, reqs, extras)
    return members


def lockstep_range(version: str) -> str:
    """``0.1.0`` -> ``>=0.1.0,<0.2``: any release of the same minor series."""
    major, minor = (int(x) for x in version.split(".")[:2])
    return f">={version},<{major}.{minor + 1}"


def needs_heavy(name: str, members: dict[str, Member], heavy: set[str], seen: frozenset = frozenset()) -> bool:
    """Whether a member's required dependencies reach a heavy one, through other members too."""
    for req in members[name].requires:
        dep = canonicalize_name(req.name)
        if dep in heavy:
            return True
        if dep in members and dep not in seen and needs_heavy(dep, members, heavy, seen | {name}):
            return True
    return False


def resolve(packs: dict[str, list[str]], heavy: set[str], members: dict[str, Member]) -> tuple[dict, list[str]]:
    """Pack name -> {member name: extras}; plus notes on names no member provides (yet)."""
    out: dict[str, dict[str, set[str]]] = {pack: {} for pack in packs}
    notes, opt_in = [], set()
    for pack, entries in packs.items():
        for entry in entries:
            name, _, extras = entry.rstrip("]").partition("[")
            hits = [m for m in members if fnmatch.fnmatch(m, canonicalize_name(name))]
            if not hits:
                notes.append(f"pack '{pack}': no member provides '{name}' yet; left out")
            for hit in hits:
                out[pack].setdefault(hit, set()).update(x.strip() for x in extras.split(",") if x.strip())
                opt_in.update([hit] if pack not in AUTO else [])
    for name in members:
        if name in opt_in:
            continue
        for pack in ("trainer",) if needs_heavy(name, members, heavy) else AUTO:
            # A member's own extra named like the pack is its part for that node (trainer).
            out[pack].setdefault(name, set()).update({pack} & members[name].extras)
    return out, notes


def requirement(member: Member, extras: set[str], version: str) -> str:
    extra = f"[{','.join(sorted(extras))}]" if extras else ""
    return f"{member.name}{extra}{lockstep_range(version)}"


def render(config: dict, members: dict[str, Member]) -> tuple[str, list[str]]:
    """The text of packages/prl/pyproject.toml, and the notes of the resolution."""
    version, packs = config["version"], config["packs"]
    resolved, notes = resolve(packs, {canonicalize_name(h) for h in config["heavy"]}, members)

    def lines(picked: dict[str, set[str]]) -> str:
        reqs = sorted(requirement(members[n], extras, version) for n, extras in picked.items())
        return "[\n" + "".join(f'  "{r}",\n' for r in reqs) + "]"

    def union(names: list[str]) -> dict[str, set[str]]:
        merged: dict[str, set[str]] = {}
        for pack in names:
            for name, extras in resolved[pack].items():
                merged.setdefault(name, set()).update(extras)
        return merged

    bundles = {**config.get("bundles", {}), "all": list(packs)}
    extras = "".join(f"{pack} = {lines(resolved[pack])}\n" for pack in packs)
    extras += "".join(f"{name} = {lines(union(names))}\n" for name, names in bundles.items())
    text = f"""# Generated by `make packs` (packages/sync.py) from packages/prl/packs.toml: edit that file.
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "prl"
version = "{version}"
description = "prl: async RL and SFT post-training of LLMs; one install name for the core and its plugin packs"
readme = "README.md"
requires-python = ">=3.11"
license = "Apache-2.0"
dependencies = {lines(union(config["default"]))}

[project.optional-dependencies]
{extras}
# The catalogue core's install hints read (prl_catalogue.py, written beside this file).
[project.entry-points."prl.catalogue"]
prl = "prl_catalogue:PROVIDES"

# No code besides it: the code lives in the member distributions this one requires.
[tool.setuptools]
packages = []
py-modules = ["prl_catalogue"]
"""
    return text, notes


def render_catalogue(config: dict, members: dict[str, Member]) -> tuple[str, list[str]]:
    """The text of prl_catalogue.py from packs.toml's [catalogue], each entry given the
    member's folder in the repository; plus notes on entries no member has."""
    provides, notes = {}, []
    for name, kinds in config.get("catalogue", {}).items():
        member = members.get(canonicalize_name(name))
        if member is None:
            notes.append(f"catalogue: no member is called '{name}'; left out")
            continue
        provides[member.name] = {"folder": member.folder, **{k: list(v) for k, v in kinds.items()}}
    body = "".join(f"    {json.dumps(name)}: {json.dumps(entry)},\n" for name, entry in provides.items())
    text = f'''# ruff: noqa: E501
"""Which in-repo distribution provides each plugin tag, for core's install hints (entry-point
group ``prl.catalogue``). Generated by `make packs` (packages/sync.py) from packages/prl/packs.toml."""

# fmt: off
PROVIDES: dict[str, dict] = {{
{body}}}
# fmt: on
'''
    return text, notes


def synced_member(text: str, version: str, members: dict[str, Member]) -> str:
    """A member's pyproject.toml with the lockstep version and member requirement ranges."""
    text = re.sub(r'(?m)^version = "[^"]*"', f'version = "{version}"', text, count=1)

    def fix(match: re.Match) -> str:
        if canonicalize_name(match[1]) not in members:
            return match[0]
        return f'"{match[1]}{match[2] or ""}{lockstep_range(version)}"'

    return "\n".join(line if re.match(r"\s*name\s*=", line) else _REQ.sub(fix, line) for line in text.split("\n"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a file is stale")
    args = parser.parse_args(argv)
    config = tomllib.loads(PACKS.read_text())
    named = {"default": config["default"], **{f"bundles.{k}": v for k, v in config.get("bundles", {}).items()}}
    for key, packs in named.items():
        unknown = sorted(set(packs) - set(config["packs"]))
        if unknown:
            print(f"prl packs: {PACKS.name}: {key} names unknown packs {unknown}", file=sys.stderr)
            return 2
    members = discover()
    wanted: dict[Path, str] = {}
    for member in members.values():
        path = ROOT / member.folder / "pyproject.toml"
        wanted[path] = synced_member(path.read_text(), config["version"], members)
    wanted[TARGET], notes = render(config, members)
    wanted[CATALOGUE], more = render_catalogue(config, members)
    notes += more
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    for note in notes:
        print(f"prl packs: {note}", file=sys.stderr)
    for path in stale:
        rel = path.relative_to(ROOT)
        if args.check:
            print(f"prl packs: {rel} is out of date; run `make packs`", file=sys.stderr)
        else:
            path.write_text(wanted[path])
            print(f"prl packs: updated {rel}")
    print(f"prl packs: {len(members)} members, version {config['version']}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
