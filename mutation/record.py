"""The record of mutation results kept in the repository (``mutation/results.json``).

One entry per target module: how many mutants it had, how many the tests killed, which
survived, and the test files that reached it. Its ``key`` hashes the module's source, the
content of those test files and the pytest options, so ``make mutation`` re-mutates a
module when its code changes or when a test that guards it changes (a weakened test must
be measured again), and otherwise takes the recorded figures.

Test files that start to reach a module after it was recorded do not change its key: a new
test can only kill more mutants, so the recorded kill rate stays a lower bound.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class ModuleResult:
    """One module's measured mutants (``survivors``: function, mutation, status each)."""

    key: str
    mutants: int
    killed: int
    tests: list[str]
    survivors: list[dict[str, str]] = field(default_factory=list)
    date: str = ""

    @property
    def rate(self) -> float:
        # A module with nothing to mutate has no bug the tests could miss.
        return self.killed / self.mutants if self.mutants else 1.0


def load(path: Path) -> dict[str, ModuleResult]:
    if not path.exists():
        return {}
    return {module: ModuleResult(**entry) for module, entry in json.loads(path.read_text()).items()}


def save(path: Path, results: dict[str, ModuleResult]) -> None:
    data = {module: asdict(results[module]) for module in sorted(results)}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def today() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()


def guard_files(root: Path, test_ids: Iterable[str]) -> list[str]:
    """The test files of ``test_ids`` (pytest node ids relative to ``root``) and every
    ``conftest.py`` above them, whose fixtures those tests run on."""
    files: set[str] = set()
    for test_id in test_ids:
        path = Path(test_id.split("::", 1)[0])
        files.add(path.as_posix())
        for parent in path.parents:
            if (root / parent / "conftest.py").exists():
                files.add((parent / "conftest.py").as_posix())
    return sorted(files)


def module_key(
    root: Path, module: str, tests: Iterable[str], options: Iterable[str], locate: Callable[[str], Path] | None = None
) -> str:
    """Hash of the module's source, its guard tests' content (a deleted file counts as
    changed) and the pytest options the mutants ran under. ``locate`` finds a repository
    path's file (default: under ``root``); a run hashes the copies it mutated and tested,
    so an edit made while it ran is not recorded as measured."""
    digest = hashlib.sha256()
    for name in [module, *sorted(tests)]:
        path = locate(name) if locate is not None else root / name
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"<missing>")
        digest.update(b"\0")
    digest.update(json.dumps(list(options)).encode())
    return digest.hexdigest()[:16]


def is_current(root: Path, module: str, result: ModuleResult | None, options: Iterable[str]) -> bool:
    """Whether ``result`` was measured on the module and guard tests as they are now."""
    return result is not None and result.key == module_key(root, module, result.tests, options)
