"""The import rules of the workspace (ARCHITECTURE: "Who may import whom"), read from the
source of every distribution the root pyproject lists as a workspace member:

* core (``prl``) imports no other distribution of the repository;
* a plugin imports core, its own modules, and of another distribution of the repository
  only the top-level package (its public API), and only when its pyproject declares that
  distribution as a dependency (required or an extra);
* no module imports itself back through others (no import circles), counting imports made
  inside functions and under ``if TYPE_CHECKING:`` too (a type-only import still ties the
  two modules' design together).

Each rule prints what it found, so ``pytest -s tests/test_import_graph.py`` is the graph's
summary.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Dist:
    name: str
    folder: Path
    packages: list[str]
    declared: set[str] = field(default_factory=set)  # canonical names of the dists it requires


@dataclass(frozen=True)
class Import:
    file: Path
    line: int
    module: str  # absolute dotted name as written (relative imports resolved)
    names: tuple[str, ...]  # for ``from m import a, b``: a, b


def _members() -> list[Path]:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["prl"]["workspace"]["members"]
    return sorted(p for g in globs for p in ROOT.glob(g) if (p / "pyproject.toml").exists() and (p / "src").is_dir())


def _dist(folder: Path) -> Dist:
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    src = folder / "src"
    packages = sorted(p.name for p in src.iterdir() if (p / "__init__.py").exists())
    return Dist(
        canonicalize_name(project["name"]), folder, packages, {canonicalize_name(Requirement(r).name) for r in reqs}
    )


def _module_name(file: Path, src: Path) -> str:
    parts = list(file.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(file: Path, src: Path) -> list[Import]:
    here = _module_name(file, src)
    package = here if file.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found += [Import(file, node.lineno, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(Import(file, node.lineno, base, tuple(a.name for a in node.names)))
    return found


@dataclass
class Graph:
    dists: list[Dist]
    modules: dict[str, Path]  # every module of the repository -> its file
    owner: dict[str, Dist]  # top-level package -> its distribution
    imports: dict[str, list[Import]]  # module -> what it imports


def _graph() -> Graph:
    dists = [_dist(f) for f in _members()]
    modules: dict[str, Path] = {}
    owner: dict[str, Dist] = {}
    imports: dict[str, list[Import]] = {}
    for d in dists:
        for pkg in d.packages:
            owner[pkg] = d
            for file in sorted((d.folder / "src" / pkg).rglob("*.py")):
                name = _module_name(file, d.folder / "src")
                modules[name] = file
                imports[name] = _imports(file, d.folder / "src")
    return Graph(dists, modules, owner, imports)


GRAPH = _graph()


def _rel(imp: Import) -> str:
    return f"{imp.file.relative_to(ROOT)}:{imp.line}"


def test_the_workspace_is_read_whole():
    names = {d.name for d in GRAPH.dists}
    assert "prl-core" in names and len(GRAPH.dists) >= 30, names
    assert len(GRAPH.modules) > 300


def test_core_imports_no_other_distribution():
    core = next(d for d in GRAPH.dists if d.name == "prl-core")
    bad = [
        f"{_rel(i)} imports {i.module}"
        for pkg in core.packages
        for name, found in GRAPH.imports.items()
        if name.split(".")[0] == pkg
        for i in found
        if (top := i.module.split(".")[0]) in GRAPH.owner and GRAPH.owner[top] is not core
    ]
    print(
        f"core: {sum(1 for m in GRAPH.modules if m.split('.')[0] in core.packages)} modules, imports of plugins: {bad}"
    )
    assert not bad, "\n".join(bad)


def _public_names(package: str) -> set[str]:
    """Names the package's ``__init__`` binds (what ``from package import name`` gets
    without reaching into a module): its imports, definitions and assignments."""
    tree = ast.parse(GRAPH.modules[package].read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _cross_imports() -> tuple[list[str], list[str]]:
    """(allowed cross-distribution imports, forbidden ones), one line each."""
    allowed, bad = [], []
    for name, found in GRAPH.imports.items():
        mine = GRAPH.owner[name.split(".")[0]]
        for i in found:
            top = i.module.split(".")[0]
            theirs = GRAPH.owner.get(top)
            if theirs is None or theirs is mine or theirs.name == "prl-core":
                continue
            line = f"{_rel(i)}: {mine.name} imports {i.module}"
            if theirs.name not in mine.declared:
                bad.append(f"{line} ({theirs.name} is not among its declared dependencies)")
            elif i.module != top or any(n not in _public_names(top) for n in i.names):
                bad.append(f"{line} (a module of {theirs.name}; only its top-level package is public)")
            else:
                allowed.append(f"{mine.name} -> {theirs.name} ({', '.join(i.names) or top})")
    return sorted(set(allowed)), bad


def test_plugins_import_only_core_and_the_public_package_of_what_they_declare():
    allowed, bad = _cross_imports()
    print("plugin -> declared library, public package only:\n  " + "\n  ".join(allowed))
    assert not bad, "\n".join(bad)


def _resolve(imp: Import) -> list[str]:
    """The repository modules an import loads: the module itself, or for ``from pkg
    import sub`` the submodule ``pkg.sub``."""
    out = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in GRAPH.modules]
    mod = imp.module
    while mod and mod not in GRAPH.modules:
        mod = mod.rpartition(".")[0]
    return out + ([mod] if mod else [])


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in GRAPH.modules}
    for name, found in GRAPH.imports.items():
        for i in found:
            for target in _resolve(i):
                # A module reaching its own enclosing package's __init__ is not a circle
                # Python can trip on (the package is initialised first); everything else is.
                if target != name and not name.startswith(target + "."):
                    edges[name].add(target)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circles():
    edges = _edges()
    circles = _circles(edges)
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} import edges, circles: {circles}")
    assert not circles, circles


def test_the_circle_finder_sees_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
