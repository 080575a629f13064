"""``make mutation``'s record (mutation/results.json): a module is mutated again exactly when
its source or a test that guards it changed, and the verdict is per module."""

from __future__ import annotations

import importlib
import sys
from argparse import Namespace
from pathlib import Path

import pytest

MUTATION = Path(__file__).resolve().parents[1] / "mutation"


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """mutation/run.py working on a two-module project in ``tmp_path``."""
    monkeypatch.syspath_prepend(str(MUTATION))
    run = importlib.import_module("run")
    record = importlib.import_module("record")
    (tmp_path / "pkg" / "src" / "p").mkdir(parents=True)
    (tmp_path / "pkg" / "src" / "p" / "a.py").write_text("def f():\n    return 1\n")
    (tmp_path / "pkg" / "src" / "p" / "b.py").write_text("def g():\n    return 2\n")
    (tmp_path / "pkg" / "tests").mkdir()
    (tmp_path / "pkg" / "tests" / "conftest.py").write_text("")
    (tmp_path / "pkg" / "tests" / "test_a.py").write_text("def test_f(): ...\n")
    (tmp_path / "pkg" / "tests" / "test_b.py").write_text("def test_g(): ...\n")
    (tmp_path / "survivors.toml").write_text("")
    monkeypatch.setattr(run, "ROOT", tmp_path)
    monkeypatch.setattr(run, "STAGE", tmp_path / "stage")
    monkeypatch.setattr(run, "RESULTS", tmp_path / "results.json")
    monkeypatch.setattr(run, "SURVIVORS", tmp_path / "survivors.toml")
    monkeypatch.setattr(run, "TARGETS", {"pkg/src/p": ["a.py", "b.py"]})
    yield run, record
    sys.modules.pop("run", None)
    sys.modules.pop("record", None)


def measured(run, record, module: str, test: str, mutants=10, killed=10, survivors=()):
    tests = record.guard_files(run.ROOT, [f"pkg/tests/{test}::test_x"])
    key = record.module_key(run.ROOT, module, tests, run.PYTEST_ARGS)
    return record.ModuleResult(key, mutants, killed, tests, list(survivors), "2026-01-01")


def recorded(run, record):
    results = {
        "pkg/src/p/a.py": measured(run, record, "pkg/src/p/a.py", "test_a.py"),
        "pkg/src/p/b.py": measured(run, record, "pkg/src/p/b.py", "test_b.py"),
    }
    record.save(run.RESULTS, results)
    return record.load(run.RESULTS)


def stale(run, results, **flags) -> list[str]:
    return run.choose(Namespace(**{"only": None, "full": False, **flags}), results)[1]


def test_guard_files_are_the_tests_that_reached_a_module_and_their_conftest(runner):
    run, record = runner
    ids = ["pkg/tests/test_a.py::test_f", "pkg/tests/test_a.py::test_g[1]"]
    assert record.guard_files(run.ROOT, ids) == ["pkg/tests/conftest.py", "pkg/tests/test_a.py"]


def test_an_unchanged_tree_mutates_nothing(runner, capsys):
    run, record = runner
    assert stale(run, recorded(run, record)) == []
    assert "checked 2 modules against results.json: 2 unchanged since their recorded result, 0 to mutate" in (
        capsys.readouterr().out
    )


def test_a_changed_module_or_guard_test_is_mutated_again(runner, capsys):
    run, record = runner
    results = recorded(run, record)
    (run.ROOT / "pkg" / "src" / "p" / "a.py").write_text("def f():\n    return 3\n")
    assert stale(run, results) == ["pkg/src/p/a.py"]
    (run.ROOT / "pkg" / "src" / "p" / "a.py").write_text("def f():\n    return 1\n")
    assert stale(run, results) == []
    (run.ROOT / "pkg" / "tests" / "test_b.py").write_text("def test_g(): pass  # weakened\n")
    assert stale(run, results) == ["pkg/src/p/b.py"]
    assert "pkg/src/p/b.py: source or guarding tests changed" in capsys.readouterr().out
    (run.ROOT / "pkg" / "tests" / "conftest.py").unlink()  # a fixture both relied on
    assert stale(run, results) == ["pkg/src/p/a.py", "pkg/src/p/b.py"]


def test_a_module_without_a_record_is_mutated_and_full_mutates_all(runner, capsys):
    run, record = runner
    results = recorded(run, record)
    del results["pkg/src/p/b.py"]
    assert stale(run, results) == ["pkg/src/p/b.py"]
    assert "pkg/src/p/b.py: no recorded result" in capsys.readouterr().out
    assert stale(run, recorded(run, record), full=True) == ["pkg/src/p/a.py", "pkg/src/p/b.py"]
    only = run.choose(Namespace(only=["*/b.py"], full=False), results)
    assert only == (["pkg/src/p/b.py"], ["pkg/src/p/b.py"])


def test_the_verdict_is_per_module_and_names_the_failing_one(runner, capsys):
    run, record = runner
    survivor = {"function": "p.a.f", "mutation": "return 2", "removed": "return 1", "status": "survived"}
    results = {
        "pkg/src/p/a.py": measured(run, record, "pkg/src/p/a.py", "test_a.py", 20, 19, [survivor]),
        "pkg/src/p/b.py": measured(run, record, "pkg/src/p/b.py", "test_b.py", 100, 100),
    }
    assert run.judge(results, set(), 0.9) == 1  # 95% killed, but the survivor is unjustified
    out = capsys.readouterr().out
    assert "FAIL pkg/src/p/a.py: unjustified survivor in p.a.f" in out and "FAIL pkg/src/p/b.py" not in out
    (run.ROOT / "survivors.toml").write_text(
        '[[survivor]]\nfunction = "p.a.f"\nmutation = "return 2"\nwhy = "equivalent"\n'
    )
    assert run.judge(results, {"pkg/src/p/b.py"}, 0.9) == 0
    out = capsys.readouterr().out
    assert "pkg/src/p/a.py" in out and "recorded 2026-01-01" in out and "mutated now" in out
    # 19 of 21 killed is 90.5% overall, but one module at 80% fails on its own.
    results["pkg/src/p/b.py"] = measured(run, record, "pkg/src/p/b.py", "test_b.py", 5, 4)
    assert run.judge(results, set(), 0.9) == 1
    assert "FAIL pkg/src/p/b.py: kill rate 80.0% is below the required 90%" in capsys.readouterr().out


def test_a_module_with_nothing_to_mutate_passes(runner):
    run, record = runner
    assert record.ModuleResult("k", 0, 0, []).rate == 1.0
