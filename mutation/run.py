"""Mutation testing of prl's learning-critical code with mutmut.

mutmut expects one package under ``./``, ``src/`` or ``source/``; prl is a workspace of many
distributions. So this script stages a mutmut project under ``build/mutation``: the packages
that hold a target module are copied whole into ``src/`` (a partial copy would lose to the
editable install on ``sys.path``), the tests that guard them are copied beside it, and mutmut
runs there. Entry points still resolve by module name, so the trainer and orchestrator load
the mutated copies.

Results are kept per module in ``mutation/results.json`` (:mod:`record`): by default only the
modules whose source or guarding tests changed since their recorded result are mutated,
``--full`` mutates every one. The run fails when a module's tests kill fewer than
``--min-kill`` of its mutants, or when a surviving mutant is not justified in
``mutation/survivors.toml`` (keyed by function and mutated code, not by mutmut's numbering,
which shifts whenever a function changes).

    python mutation/run.py [--full] [--budget SECONDS] [--min-kill 0.9] [--only GLOB ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / "build" / "mutation"
SURVIVORS = ROOT / "mutation" / "survivors.toml"
RESULTS = ROOT / "mutation" / "results.json"
MUTMUT = str(Path(sys.executable).with_name("mutmut"))  # the venv running this script

# The learning-critical modules: advantages of every algorithm, every loss and the shared
# loss pieces, the orchestrator's buffer, packing and off-policy control, the trainer's RL
# step and log-probs, its optimizer and schedule, LoRA, the SFT data path (masks, shifts,
# packing, steps) and checkpoint save/resume with the layout that picks the resume step.
# Package source dir -> modules mutated in it.
TARGETS: dict[str, list[str]] = {
    "algorithms/grpo/src/prl_algo_grpo": ["algorithm.py"],
    "algorithms/max-rl/src/prl_algo_max_rl": ["algorithm.py"],
    "algorithms/loss-common/src/prl_loss_common": ["components.py", "normalise.py", "ratios.py"],
    "algorithms/loss-ppo/src/prl_loss_ppo": ["loss.py"],
    "algorithms/loss-ipo/src/prl_loss_ipo": ["loss.py"],
    "algorithms/loss-cispo/src/prl_loss_cispo": ["loss.py"],
    "algorithms/loss-icepop/src/prl_loss_icepop": ["loss.py"],
    "core/src/prl": [
        "advantages.py",
        "orchestrator/buffer.py",
        "orchestrator/packing.py",
        "orchestrator/offpolicy.py",
        "orchestrator/checkpoint.py",
        "orchestrator/samples.py",
        "tasks/branches.py",
        "envs/wire.py",
        "layout.py",
    ],
    "plugins/trainer-torch/src/prl_trainer_torch": [
        "rl_step.py",
        "logprobs.py",
        "data.py",
        "lora.py",
        "checkpoint.py",
        "optim.py",
        "loader.py",
        "sft.py",
    ],
    "renderers/renderers/src/prl_renderers": ["convert.py", "default.py"],
    "plugins/weights-filesystem/src/prl_weights_filesystem": ["transport.py"],
    "plugins/weights-nccl/src/prl_weights_nccl": ["group.py"],
    "plugins/inference-torch/src/prl_inference_torch": ["sampling.py", "kv.py", "weights.py"],
}
# Targets whose tests are written but that still have survivors nobody has killed or
# justified (listed in docs/testing.md): `--pending` mutates and judges them with the rest;
# CI's `make mutation` leaves them out until they pass and move up into TARGETS.
PENDING: dict[str, list[str]] = {}
TESTS = [
    "algorithms/grpo/tests",
    "algorithms/max-rl/tests",
    "algorithms/loss-common/tests",
    "algorithms/loss-ppo/tests",
    "algorithms/loss-ipo/tests",
    "algorithms/loss-cispo/tests",
    "algorithms/loss-icepop/tests",
    "core/tests/conftest.py",
    "core/tests/orchestrator",
    "core/tests/test_layout.py",
    "core/tests/test_layout_retention.py",
    "plugins/trainer-torch/tests",
    "plugins/inference-torch/tests/conftest.py",  # the engine tests' tiny_model fixture
    "plugins/inference-torch/tests/engine",
    "core/tests/tasks",
    "core/tests/envs",
    "renderers/renderers/tests",
    "plugins/weights-filesystem/tests",
    "plugins/weights-nccl/tests",
]
# Repository folders the tests read besides their own (test_moe_lora's dry runs load an
# example config): copied into the stage beside the tests.
DATA = ["examples"]
# The fast tier only: each mutant reruns the tests that reach its function. The compiled
# kernel test is left out: torch.compile starts cold in every forked mutant (8 s each, for
# 270 mutants), and the eager tests check the same kernels' maths.
PYTEST_ARGS = [
    "-p", "no:cacheprovider", "--import-mode=importlib", "-m", "not (vllm or verifiers or slow or long)",
    "--deselect", "plugins/trainer-torch/tests/test_logprobs.py::test_compiled_chunk_kernels_match",
]  # fmt: skip
KILLED = ("killed", "timeout", "segfault")  # a mutant the tests noticed, one way or another


@dataclass(frozen=True)
class Mutant:
    name: str
    status: str
    function: str
    removed: str
    added: str

    @property
    def key(self) -> tuple[str, str]:
        return self.function, self.added


def target_modules(targets: dict[str, list[str]] | None = None) -> dict[str, str]:
    """Every target module: repository path -> dotted name (how mutmut names its mutants)."""
    out = {}
    for src, modules in (TARGETS if targets is None else targets).items():
        for module in modules:
            out[f"{src}/{module}"] = ".".join([Path(src).name, *Path(module).with_suffix("").parts])
    return out


def stage(selected: list[str]) -> None:
    """Copy the target packages and their tests into a fresh mutmut project that mutates
    the ``selected`` modules (repository paths)."""
    shutil.rmtree(STAGE, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    only = []
    for src in TARGETS:
        package = Path(src).name
        shutil.copytree(ROOT / src, STAGE / "src" / package, ignore=ignore)
        only += [f"src/{package}/{m.removeprefix(src + '/')}" for m in selected if m.startswith(src + "/")]
    for test in TESTS:
        target = STAGE / test
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / test).is_dir():
            shutil.copytree(ROOT / test, target, ignore=ignore)
        else:
            shutil.copy2(ROOT / test, target)
    for folder in DATA:
        shutil.copytree(ROOT / folder, STAGE / folder, ignore=ignore)
    workspace = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers = workspace["tool"]["pytest"]["ini_options"]["markers"]
    top_dirs = sorted({t.split("/")[0] for t in TESTS} | set(DATA))
    selection = [t for t in TESTS if not t.endswith("conftest.py")]
    (STAGE / "pyproject.toml").write_text(
        "[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = {json.dumps(only)}\n"
        f"also_copy = {json.dumps(top_dirs)}\n"
        f"pytest_add_cli_args = {json.dumps(PYTEST_ARGS)}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(selection)}\n"
        "\n[tool.pytest.ini_options]\n"
        f"markers = {json.dumps(markers)}\n"
        'filterwarnings = ["ignore::DeprecationWarning"]\n'
    )


def mutmut(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([MUTMUT, *args], cwd=STAGE, text=True, **kwargs)


def run(budget: float, children: int) -> None:
    """Run mutmut, printing one progress line every 30 s; stop at the budget."""
    # One thread per test process: the workers already fill the cores, and forked children
    # of a process with a live OpenMP pool can hang.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    log = (STAGE / "mutmut.log").open("w")
    proc = subprocess.Popen(
        [MUTMUT, "run", "--max-children", str(children)],
        cwd=STAGE,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its forked workers die with it at the budget
    )
    start = last = time.monotonic()
    try:
        while proc.poll() is None:
            time.sleep(2)
            now = time.monotonic()
            if now - start > budget:
                sys.exit(f"mutation: over the budget of {budget:.0f} s (nothing recorded); see {STAGE / 'mutmut.log'}")
            if now - last >= 30:
                last = now
                print(f"mutation: {now - start:5.0f} s  {progress()}", flush=True)
    finally:
        if proc.poll() is None:  # over budget or interrupted: take the workers down too
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode != 0:
        print((STAGE / "mutmut.log").read_text()[-3000:])
        sys.exit(f"mutation: mutmut exited {proc.returncode}")
    print(f"mutation: mutmut finished in {time.monotonic() - start:.0f} s", flush=True)


def progress() -> str:
    text = (STAGE / "mutmut.log").read_text(errors="replace")
    found = re.findall(r"(\d+/\d+)\s+🎉 (\d+) 🫥 (\d+)\s+⏰ (\d+)\s+🤔 (\d+)\s+🙁 (\d+)", text)
    if not found:
        return text.strip().splitlines()[-1][-80:] if text.strip() else "starting"
    done, killed, no_tests, timeout, suspicious, survived = found[-1]
    return f"{done} mutants: {killed} killed, {survived} survived, {timeout} timed out, {no_tests} untested"


def demangle(name: str) -> str:
    """``pkg.mod.xǁClassǁmethod__mutmut_3`` -> ``pkg.mod.Class.method``."""
    module, _, func = name.rpartition(".")
    func = re.sub(r"__mutmut_\d+$", "", func)
    func = func[2:] if func.startswith("x_") else func.removeprefix("x")
    return f"{module}.{func.strip('ǁ').replace('ǁ', '.')}"


def collect() -> list[Mutant]:
    out = mutmut("results", "--all", "true", capture_output=True).stdout
    mutants = []
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if not sep:
            continue
        removed = added = ""
        if status not in KILLED:
            diff = mutmut("show", name, capture_output=True).stdout.splitlines()
            removed = " / ".join(d[1:].strip() for d in diff if d.startswith("-") and not d.startswith("---"))
            added = " / ".join(d[1:].strip() for d in diff if d.startswith("+") and not d.startswith("+++"))
        mutants.append(Mutant(name, status, demangle(name), removed, added))
    return mutants


def staged(path: str) -> Path:
    """Where the stage holds a repository path: a target module under ``src/<package>``,
    a test at the same relative path."""
    for src in TARGETS:
        if path.startswith(src + "/"):
            return STAGE / "src" / Path(src).name / path.removeprefix(src + "/")
    return STAGE / path


def summarise(mutants: list[Mutant], selected: list[str]) -> dict[str, record.ModuleResult]:
    """Per selected module: its mutants, kills, survivors and the test files that reached
    it (from mutmut's stats), keyed for :func:`record.is_current`."""
    dotted = {d: path for path, d in target_modules().items() if path in selected}
    stats = json.loads((STAGE / "mutants" / "mutmut-stats.json").read_text())["tests_by_mangled_function_name"]
    tests: dict[str, set[str]] = {path: set() for path in selected}
    for function, ids in stats.items():
        path = dotted.get(function.rpartition(".")[0])
        if path is not None:
            tests[path].update(ids)
    results = {}
    for path in selected:
        guards = record.guard_files(STAGE, tests[path])
        mine = [m for m in mutants if dotted.get(m.name.rpartition(".")[0]) == path]
        results[path] = record.ModuleResult(
            key=record.module_key(ROOT, path, guards, PYTEST_ARGS, locate=staged),
            mutants=len(mine),
            killed=sum(m.status in KILLED for m in mine),
            tests=guards,
            survivors=[
                {"function": m.function, "mutation": m.added, "removed": m.removed, "status": m.status}
                for m in mine
                if m.status not in KILLED
            ],
            date=record.today(),
        )
    return results


def report(results: dict[str, record.ModuleResult], fresh: set[str], justified: dict) -> None:
    """Print the per-module table; write it and every survivor to ``<stage>/report.md``."""
    width = max(len(p) for p in results)
    lines = ["| Module | Mutants | Killed | Survived | Kill rate | Result |", "| --- | --: | --: | --: | --: | --- |"]
    print(f"mutation: {'module':<{width}}  mutants  killed  rate    result")
    for path, res in sorted(results.items()):
        source = "mutated now" if path in fresh else f"recorded {res.date}"
        print(f"mutation: {path:<{width}}  {res.mutants:7d}  {res.killed:6d}  {res.rate:6.1%}  {source}")
        lines.append(f"| `{path}` | {res.mutants} | {res.killed} | {len(res.survivors)} | {res.rate:.1%} | {source} |")
    lines.append("")
    for res in (results[p] for p in sorted(results)):
        for s in res.survivors:
            why = justified.get((s["function"], s["mutation"]), "NOT JUSTIFIED")
            lines += [f"- `{s['function']}` ({s['status']}): `{s['removed']}` -> `{s['mutation']}`", f"  - {why}"]
    STAGE.mkdir(parents=True, exist_ok=True)
    (STAGE / "report.md").write_text("\n".join(lines) + "\n")
    mutants, killed = sum(r.mutants for r in results.values()), sum(r.killed for r in results.values())
    print(f"mutation: {killed}/{mutants} mutants killed over {len(results)} modules; report in {STAGE / 'report.md'}")


def judge(results: dict[str, record.ModuleResult], fresh: set[str], min_kill: float) -> int:
    """1 when a module's kill rate is below ``min_kill`` or one of its survivors is not
    justified in survivors.toml, naming the module; 0 otherwise."""
    entries = tomllib.loads(SURVIVORS.read_text()).get("survivor", [])
    justified = {(s["function"], s["mutation"]): s["why"] for s in entries}
    report(results, fresh, justified)
    modules = {s["function"].rsplit(".", 1)[0] for r in results.values() for s in r.survivors}
    alive = {(s["function"], s["mutation"]) for r in results.values() for s in r.survivors}
    for function, mutation in sorted(set(justified) - alive):
        if function.rsplit(".", 1)[0] in modules:  # only where this run saw the module's survivors
            print(f"mutation: justified survivor no longer survives (remove it): {function}: {mutation}")
    failed = 0
    for path, res in sorted(results.items()):
        if res.rate < min_kill:
            failed += 1
            print(f"mutation: FAIL {path}: kill rate {res.rate:.1%} is below the required {min_kill:.0%}")
        for s in res.survivors:
            if (s["function"], s["mutation"]) not in justified:
                failed += 1
                print(f"mutation: FAIL {path}: unjustified survivor in {s['function']} ({s['status']})")
                print(f"    - {s['removed']}\n    + {s['mutation']}")
    return 1 if failed else 0


def choose(args: argparse.Namespace, results: dict[str, record.ModuleResult]) -> tuple[list[str], list[str]]:
    """(modules to judge, modules to mutate now): ``--only`` globs mutate what they match,
    ``--full`` everything, and by default the modules without a current record."""
    modules = list(target_modules())
    if args.only:
        modules = [m for m in modules if any(fnmatch(m, g) for g in args.only)]
        return modules, modules
    if args.full:
        return modules, modules
    stale = [m for m in modules if not record.is_current(ROOT, m, results.get(m), PYTEST_ARGS)]
    print(f"mutation: checked {len(modules)} modules against {RESULTS.relative_to(ROOT)}: "
          f"{len(modules) - len(stale)} unchanged since their recorded result, {len(stale)} to mutate")  # fmt: skip
    for m in stale:
        print(f"mutation:   {m}: {'no recorded result' if m not in results else 'source or guarding tests changed'}")
    return modules, stale


def _with_pending() -> dict[str, list[str]]:
    merged = {src: list(modules) for src, modules in TARGETS.items()}
    for src, modules in PENDING.items():
        merged.setdefault(src, []).extend(m for m in modules if m not in merged[src])
    return merged


def main() -> int:
    global STAGE  # the stage is module-wide; --stage lets two runs work side by side
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="mutate every target module, recorded or not")
    parser.add_argument("--budget", type=float, default=1800, help="seconds mutmut may run before the run fails")
    parser.add_argument("--min-kill", type=float, default=0.9, help="fraction of each module's mutants to kill")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2, help="mutants tested in parallel")
    parser.add_argument(
        "--only", action="append", help="mutate only target modules matching this glob (repeatable; local iteration)"
    )
    parser.add_argument("--stage", type=Path, help=f"where to build the mutmut project (default {STAGE})")
    parser.add_argument("--no-record", action="store_true", help=f"leave {RESULTS.name} as it is")
    parser.add_argument("--pending", action="store_true", help="include the PENDING modules (not yet gating CI)")
    args = parser.parse_args()
    if args.stage:
        STAGE = args.stage.resolve()
    known = target_modules(_with_pending()) | target_modules()  # records kept for both
    if args.pending:
        TARGETS.clear()
        TARGETS.update(_with_pending())
    results = record.load(RESULTS)
    judged, selected = choose(args, results)
    if not judged:
        sys.exit("mutation: no target module matches --only")
    if selected:
        stage(selected)
        run(args.budget, args.children)
        results.update(summarise(collect(), selected))
        if not args.no_record:
            # Re-read: a run beside this one (--stage) may have recorded other modules.
            latest = record.load(RESULTS)
            latest.update({m: results[m] for m in selected})
            record.save(RESULTS, {m: r for m, r in latest.items() if m in known})
    return judge({m: results[m] for m in judged}, set(selected), args.min_kill)


if __name__ == "__main__":
    sys.exit(main())
