"""Mutation testing of prl's learning-critical code with mutmut.

mutmut expects one package under ``./``, ``src/`` or ``source/``; prl is a workspace of many
distributions. So this script stages a mutmut project under ``build/mutation``: the packages
that hold a target module are copied whole into ``src/`` (a partial copy would lose to the
editable install on ``sys.path``), the tests that guard them are copied beside it, and mutmut
runs there. Entry points still resolve by module name, so the trainer and orchestrator load
the mutated copies.

The run fails when fewer than ``--min-kill`` of the mutants are killed, or when a surviving
mutant is not justified in ``mutation/survivors.toml`` (keyed by function and mutated code,
not by mutmut's numbering, which shifts whenever a function changes).

    python mutation/run.py [--budget SECONDS] [--min-kill 0.9] [--only GLOB]
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

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / "build" / "mutation"
SURVIVORS = ROOT / "mutation" / "survivors.toml"
MUTMUT = str(Path(sys.executable).with_name("mutmut"))  # the venv running this script

# The learning-critical modules: advantages of every algorithm, every loss and the shared
# loss pieces, the orchestrator's buffer, packing and off-policy control, and the trainer's
# RL step and log-probs. Package source dir -> modules mutated in it.
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
        "orchestrator/samples.py",
        "tasks/branches.py",
        "envs/wire.py",
    ],
    "plugins/trainer-torch/src/prl_trainer_torch": ["rl_step.py", "logprobs.py"],
    "plugins/inference-torch/src/prl_inference_torch": ["sampling.py", "kv.py", "weights.py"],
    "renderers/renderers/src/prl_renderers": ["convert.py"],
    "plugins/weights-filesystem/src/prl_weights_filesystem": ["transport.py"],
}
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
    "plugins/trainer-torch/tests",
    "plugins/inference-torch/tests/engine",
    "core/tests/tasks",
    "core/tests/envs",
    "renderers/renderers/tests",
    "plugins/weights-filesystem/tests",
]
# The fast tier only: each mutant reruns the tests that reach its function. The compiled
# kernel test is left out: torch.compile starts cold in every forked mutant (8 s each, for
# 270 mutants), and the eager tests check the same kernels' maths.
PYTEST_ARGS = [
    "-p", "no:cacheprovider", "--import-mode=importlib", "-m", "not (vllm or verifiers or slow)",
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


def stage() -> None:
    """Copy the target packages and their tests into a fresh mutmut project."""
    shutil.rmtree(STAGE, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    only = []
    for src, modules in TARGETS.items():
        package = Path(src).name
        shutil.copytree(ROOT / src, STAGE / "src" / package, ignore=ignore)
        only += [f"src/{package}/{m}" for m in modules]
    for test in TESTS:
        target = STAGE / test
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / test).is_dir():
            shutil.copytree(ROOT / test, target, ignore=ignore)
        else:
            shutil.copy2(ROOT / test, target)
    workspace = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers = workspace["tool"]["pytest"]["ini_options"]["markers"]
    top_dirs = sorted({t.split("/")[0] for t in TESTS})
    (STAGE / "pyproject.toml").write_text(
        "[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = {json.dumps(only)}\n"
        f"also_copy = {json.dumps(top_dirs)}\n"
        f"pytest_add_cli_args = {json.dumps(PYTEST_ARGS)}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps([t for t in TESTS if not t.endswith('.py')])}\n"
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
                sys.exit(f"mutation: over the budget of {budget:.0f} s; see {STAGE / 'mutmut.log'}")
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


def judge(mutants: list[Mutant], min_kill: float) -> int:
    justified = {
        (s["function"], s["mutation"]): s["why"] for s in tomllib.loads(SURVIVORS.read_text()).get("survivor", [])
    }
    survivors = [m for m in mutants if m.status not in KILLED]
    killed = len(mutants) - len(survivors)
    rate = killed / max(len(mutants), 1)
    unjustified = [m for m in survivors if m.key not in justified]
    lines = [f"# Mutation report: {killed}/{len(mutants)} killed ({rate:.1%})", ""]
    for m in survivors:
        why = justified.get(m.key, "NOT JUSTIFIED")
        lines += [f"- `{m.function}` ({m.status}): `{m.removed}` -> `{m.added}`", f"  - {why}"]
    (STAGE / "report.md").write_text("\n".join(lines) + "\n")
    stale = set(justified) - {m.key for m in survivors}
    for function, mutation in sorted(stale):
        print(f"mutation: justified survivor no longer survives (remove it): {function}: {mutation}")
    for m in unjustified:
        print(f"mutation: unjustified survivor {m.name} ({m.status})\n    - {m.removed}\n    + {m.added}")
    print(
        f"mutation: {killed}/{len(mutants)} mutants killed ({rate:.1%}), {len(survivors)} survived "
        f"({len(survivors) - len(unjustified)} justified); report in {STAGE / 'report.md'}"
    )
    if rate < min_kill:
        print(f"mutation: kill rate {rate:.1%} is below the required {min_kill:.0%}")
        return 1
    return 1 if unjustified else 0


def main() -> int:
    global STAGE  # the stage is module-wide; --stage lets two runs work side by side
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1800, help="seconds mutmut may run before the run fails")
    parser.add_argument("--min-kill", type=float, default=0.9, help="fraction of mutants the tests must kill")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2, help="mutants tested in parallel")
    parser.add_argument("--only", help="restrict to target modules matching this glob (for local iteration)")
    parser.add_argument("--stage", type=Path, help=f"where to build the mutmut project (default {STAGE})")
    args = parser.parse_args()
    if args.stage:
        STAGE = args.stage.resolve()
    if args.only:
        for src in list(TARGETS):
            TARGETS[src] = [m for m in TARGETS[src] if fnmatch(f"{src}/{m}", args.only)]
    stage()
    run(args.budget, args.children)
    return judge(collect(), args.min_kill)


if __name__ == "__main__":
    sys.exit(main())
