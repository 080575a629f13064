"""`prl new plugin KIND NAME` gives, for every plugin kind, a distribution that installs,
shows up in `prl plugins`, passes its own tests, is ruff-clean, and runs: one real
`prl rl` selects all nine new plugins at once.

Every kind is scaffolded once per module into a temporary directory (outside the
repository) and installed there with one `pip install --target` (not editable, so the venv
stays untouched); the listing, the generated tests and the run then happen in subprocesses
that see that directory on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prl.cli.main import app
from prl.plugins import KINDS
from prl.scaffold import MAX_NAME, Names, resolve_kind
from prl.scaffold.kinds import TEMPLATES

ALIASES = [t.alias for t in TEMPLATES.values()]


def names(alias: str) -> Names:
    return Names(f"demo-{alias}", resolve_kind(alias))


def clean_env(**extra: str) -> dict[str, str]:
    # Plugin switches of the outer environment must not hide the new plugins.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRL_", "PYTEST_"))}
    return {**env, **extra}


def on_path(site: Path) -> str:
    """PYTHONPATH with the installed scaffolds first (and whatever the outer one held)."""
    return os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)


def run(*argv: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=300
    )


def new_plugin(alias: str, name: str, out: Path) -> None:
    result = CliRunner().invoke(app, ["new", "plugin", alias, name, "--out", str(out)])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """demo-<kind> for every kind under root/src/<kind>."""
    root = tmp_path_factory.mktemp("scaffold")
    for alias in ALIASES:
        new_plugin(alias, f"demo-{alias}", root / "src" / alias)
    return root


@pytest.fixture(scope="module")
def site(root) -> Path:
    # --no-build-isolation: the venv's setuptools builds them, so no index is needed.
    dirs = [root / "src" / alias for alias in ALIASES]
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    result = run(*pip, "--disable-pip-version-check", "--target", root / "site", *dirs, cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    return root / "site"


@pytest.fixture(scope="module")
def listing(root, site) -> dict[str, dict]:
    result = run(sys.executable, "-m", "prl", "plugins", "--json", cwd=root, PYTHONPATH=on_path(site))
    assert result.returncode == 0, result.stderr
    return {row["distribution"]: row for row in json.loads(result.stdout)}


@pytest.fixture(scope="module")
def generated_tests(root, site) -> dict[str, list[str]]:
    """Outcome of every generated test, by test file name; one pytest run for all kinds."""
    report = root / "report.xml"
    dirs = [root / "src" / alias / "tests" for alias in ALIASES]
    pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib"]
    junit = ["--rootdir", root, "-o", "junit_family=xunit1", f"--junitxml={report}"]
    result = run(*pytest_argv, *junit, *dirs, cwd=root, PYTHONPATH=on_path(site))
    assert report.exists(), result.stdout + result.stderr
    outcomes: dict[str, list[str]] = {}
    for case in ET.parse(report).iter("testcase"):
        failed = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes.setdefault(Path(case.get("file", "")).name, []).append(failed[0] if failed else "passed")
    outcomes["_output"] = [result.stdout[-3000:]]
    return outcomes


def test_every_kind_has_a_template():
    assert set(TEMPLATES) == set(KINDS)
    assert {resolve_kind(kind).kind for kind in KINDS} == set(KINDS)


@pytest.mark.slow
@pytest.mark.parametrize("alias", ALIASES)
def test_installed_plugin_is_listed_with_its_tag(alias, listing):
    n = names(alias)
    assert n.dist in listing, sorted(listing)
    assert listing[n.dist]["name"] == n.entry
    assert listing[n.dist]["registers"] == {n.template.kind: [n.tag]}


@pytest.mark.slow
@pytest.mark.parametrize("alias", ALIASES)
def test_generated_tests_pass(alias, generated_tests):
    outcomes = generated_tests.get(f"test_{names(alias).ident}.py")
    assert outcomes, generated_tests["_output"]
    assert set(outcomes) == {"passed"}, generated_tests["_output"]


@pytest.mark.slow
def test_one_config_selects_every_new_plugin(root, site):
    # The README of each distribution shows its `selects` snippet; together they must make
    # a valid `prl rl` config that resolves to the new plugins (a tag that is not installed
    # fails validation, so the dry run succeeding covers [deployment] too).
    snippets = [t.selects.format(tag=names(t.alias).tag) for t in TEMPLATES.values()]
    (root / "rl.toml").write_text('max_steps = 2\n\n[model]\nname = "models/tiny"\n\n' + "\n\n".join(snippets) + "\n")
    # a dry run checks that the model exists (a directory; it is never loaded here)
    (root / "models" / "tiny").mkdir(parents=True, exist_ok=True)
    argv = ["rl", "@", root / "rl.toml", "--dry-run", "--output-dir", root / "runs"]
    result = run(sys.executable, "-m", "prl", *argv, cwd=root, PYTHONPATH=on_path(site))
    assert result.returncode == 0, result.stdout + result.stderr
    [resolved] = (root / "runs").glob("*/configs/attempt_1/resolved")
    orch, trainer, inference = (
        json.loads((resolved / f"{c}.json").read_text()) for c in ("orchestrator", "trainer", "inference")
    )
    [source] = (resolved / "envs" / "train").glob("*.json")
    tag = {t.kind: names(t.alias).tag for t in TEMPLATES.values()}
    assert orch["train"]["algo"]["type"] == tag["algorithms"]
    assert orch["renderer"]["name"] == tag["renderers"]
    assert trainer["type"] == tag["trainers"] and trainer["loss"]["type"] == tag["losses"]
    assert trainer["weight_broadcast"]["type"] == orch["weight_broadcast"]["type"] == tag["weight_transports"]
    assert trainer["monitors"][tag["monitors"]] == orch["monitors"][tag["monitors"]] == {"path": None}
    assert inference["backend"]["type"] == tag["inference_backends"]
    assert json.loads(source.read_text())["env"]["taskset"]["id"] == tag["tasksets"]


RENDERER_SYSTEM = "You answer as the scaffolded renderer asks."
# The in-repo distributions the real run leans on: the tiny model, the bases of the backend
# and trainer scaffolds, reverse-text, and the file monitor whose traces it reads back.
RUN_NEEDS = ("prl_model_init", "prl_inference_torch", "prl_trainer_torch", "prl_tasks_builtin", "prl_monitor_file")


@pytest.mark.slow
def test_a_real_prl_rl_run_uses_every_new_plugin(root, site):
    """Two steps of `prl rl` on a tiny model made here, with the README snippet of every new
    plugin pasted into the config: the new launcher starts inference (the new backend), the
    orchestrator and the new trainer side by side; weights go through the new transport.
    The tiny random model never answers the new taskset's arithmetic, so its groups carry no
    signal and are left out of batches: reverse-text (partial credit) stays a source so the
    steps train on something and the new algorithm and loss have work to do."""
    for module in RUN_NEEDS:
        pytest.importorskip(module)
    from prl_model_init.build import make_model

    from prl.testing.configs import tiny_rl_config, toml_text

    model = make_model(root / "model", preset="tiny")
    base = toml_text(tiny_rl_config(model, root / "outputs", {"ckpt": {}}))
    snippets = [t.selects.format(tag=names(t.alias).tag) for t in TEMPLATES.values()]
    (root / "run.toml").write_text(base + "\n" + "\n\n".join(snippets) + "\n")
    flags = ["--run.name", "e2e", "--orchestrator.renderer.system-prompt", RENDERER_SYSTEM]
    flags += ["--orchestrator.train.algo.scale", "2"]
    result = run(sys.executable, "-m", "prl", "rl", "@", root / "run.toml", *flags, cwd=root, PYTHONPATH=on_path(site))
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    run_dir, tag = root / "outputs" / "e2e", {t.kind: names(t.alias).tag for t in TEMPLATES.values()}
    _assert_processes_ran(result.stdout, run_dir / "logs" / "attempt_1", tag)
    final = run_dir / "checkpoints" / "step_2"
    assert (final / "trainer" / "COMPLETE").exists() and (final / "orchestrator" / "COMPLETE").exists()
    # The new transport's files, and none of the default transport's.
    weights = run_dir / f"weights-{names('weight-transport').name}"
    assert sorted(p.relative_to(weights).as_posix() for p in weights.rglob("*.safetensors")) == [
        "step_1/model.safetensors",
        "step_2/model.safetensors",
    ]
    assert not list(run_dir.glob("broadcasts/**/*.safetensors"))
    _assert_monitor_rows(run_dir / "monitors" / tag["monitors"], tag["tasksets"])
    _assert_traces(run_dir / "monitors" / "file" / "traces", model, tag["tasksets"])


def _assert_processes_ran(stdout: str, logs: Path, tag: dict[str, str]) -> None:
    """The new launcher started the services first; the new backend and trainer said so."""
    started = [line.split()[2] for line in stdout.splitlines() if line.startswith(f"{tag['launchers']}: started ")]
    assert started == ["inference", "orchestrator", "trainer"], stdout
    assert "Run finished in" in stdout
    backend = f"inference backend {tag['inference_backends']} serving"
    assert backend in (logs / "inference.log").read_text()
    assert f"trainer {tag['trainers']}: RL of" in (logs / "trainer.log").read_text()


def _assert_monitor_rows(monitor_dir: Path, taskset: str) -> None:
    """The new monitor wrote each process's rows; the new taskset and loss fed them."""
    orch, trainer = (
        [json.loads(line) for line in (monitor_dir / f"{producer}.jsonl").read_text().splitlines()]
        for producer in ("orch", "trainer")
    )
    assert [r["step"] for r in orch if r["step"] is not None] == [1, 2]
    assert all(r[f"rollouts/{taskset}/count"] > 0 for r in orch if r["step"] is not None)
    trained = [r for r in trainer if "loss/all" in r]
    assert [r["step"] for r in trained] == [1, 2]
    # logprob_gap is the new loss's own metric: the trainer called it on every step.
    assert all("loss/logprob_gap" in r and r["optim/grad_norm"] > 0 for r in trained)


def _assert_traces(traces: Path, model: Path, taskset: str) -> None:
    """The new taskset's questions were asked, rendered after the new renderer's system
    prompt, and the new algorithm scored every group: 2 · (reward − group mean)."""
    from prl_monitor_file import read_trace
    from transformers import AutoTokenizer

    index = [json.loads(line) for line in (traces / "stream.index.jsonl").read_text().splitlines()]
    ours = [r for r in index if r["env"] == taskset]
    assert ours, sorted({r["env"] for r in index})
    trace = read_trace(traces / "stream", int(ours[0]["chunk"]), int(ours[0]["offset"]))
    question = trace["messages"][0]["content"]
    assert question.startswith("What is ") and "answer_chars" in trace["metrics"]
    prompt = AutoTokenizer.from_pretrained(model).decode(trace["branches"][0]["token_ids"])
    assert prompt.index(RENDERER_SYSTEM) < prompt.index(question)
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in index:
        groups.setdefault((row["env"], row["group"]), []).append(row)
    for rows in groups.values():
        mean = sum(r["reward"] for r in rows) / len(rows)
        assert [r["advantage"] for r in rows] == pytest.approx([2 * (r["reward"] - mean) for r in rows])


@pytest.mark.slow
def test_generated_code_is_ruff_clean(root, tmp_path):
    pytest.importorskip("ruff")
    # The longest allowed name too: generated lines must stay within the limit.
    long_name = ("x" * MAX_NAME)[: MAX_NAME - 2] + "-y"
    for alias in ALIASES:
        new_plugin(alias, long_name, tmp_path / alias)
    for tree in (root / "src", tmp_path):
        check = run(sys.executable, "-m", "ruff", "check", "--no-cache", ".", cwd=tree)
        assert check.returncode == 0, check.stdout + check.stderr
        fmt = run(sys.executable, "-m", "ruff", "format", "--check", "--no-cache", ".", cwd=tree)
        assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_names_follow_the_in_repo_conventions():
    algo = Names("my-thing", resolve_kind("algorithm"))
    assert (algo.dist, algo.package, algo.tag, algo.entry) == (
        "prl-algo-my-thing",
        "prl_algo_my_thing",
        "my_thing",
        "algo-my-thing",
    )
    tasks = Names("my-thing", resolve_kind("tasksets"))
    assert (tasks.dist, tasks.tag, tasks.cls) == ("prl-tasks-my-thing", "my-thing", "MyThingTaskset")
    assert Names("my-thing", resolve_kind("monitor")).tag == "my_thing"  # a [monitors.<key>] field name


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["algorithm", "My_Thing"], "NAME 'My_Thing'"),
        (["algorithm", "2fast"], "NAME '2fast'"),
        (["gizmo", "my-thing"], "KIND 'gizmo'"),
        (["loss", "existing"], "--out"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, needle, tmp_path):
    target = tmp_path / "existing"
    (target / "keep.txt").parent.mkdir()
    (target / "keep.txt").write_text("mine")
    result = run(sys.executable, "-m", "prl", "new", "plugin", *argv, "--out", target, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert (target / "keep.txt").read_text() == "mine" and len(list(target.iterdir())) == 1
