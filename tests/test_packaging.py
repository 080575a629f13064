"""prl installed like a library: `make wheels`, then fresh venvs that install only those wheels
(never an editable install) and use them the way a user would.

* `pip install prl` (the default) has no torch and lists exactly the plugins of its packs;
  `prl[orchestrator]` then runs a real orchestrator against a real inference server started
  from the dev venv, for two steps, while this process stands in for the trainer.
* Uninstalling one plugin removes its tags, and a config naming it says what to install.
* A taskset, a renderer and a monitor made with `prl new plugin` outside the repository are
  installed from their wheels next to `prl[trainer]` and used by a real `prl rl` run.

The prl wheels come from the wheel folder only (checked against pip's install report). Third
party dependencies come from pip's configured index for the torch-free venv; the trainer venv
sees the dev venv's third-party packages (torch, transformers, ...) through a .pth file and
installs with --no-index, so pip still resolves the trainer extra but downloads nothing.
Each phase prints its wall time ("packaging: <phase> <seconds>s").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import threading
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from prl.testing.configs import tiny_rl_toml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packages"))
import sync  # noqa: E402  (packages/sync.py: the pack rules under test)

sys.path.remove(str(ROOT / "packages"))


@contextmanager
def phase(name: str):
    start = time.monotonic()
    yield
    print(f"packaging: {name} {time.monotonic() - start:.1f}s")


def clean_env(**extra: str) -> dict[str, str]:
    # The outer run's plugin switches and venv must not leak into the fresh venvs.
    drop = ("PRL_", "PYTEST_", "VIRTUAL_ENV", "PYTHONPATH")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(drop)}, **extra}


def sh(*argv, cwd: Path | None = None, timeout: float = 900, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [str(a) for a in argv]
    return subprocess.run(argv, cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.args, result.stdout[-3000:], result.stderr[-3000:])
    return result.stdout


def pip(venv: Path, *args) -> list:
    """The dev venv's pip acting on `venv` (so the fresh venvs need no pip of their own)."""
    return [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "--disable-pip-version-check", *args]


def new_venv(path: Path) -> Path:
    ok(sh(sys.executable, "-m", "venv", "--without-pip", path))
    return path


def install(venv: Path, wheels: Path, *reqs: str, no_index: bool = False, links: tuple = ()) -> list[dict]:
    """pip install from the wheel folder; returns the report's installed items, after checking
    that every prl distribution among them is a wheel from that folder."""
    report = venv / f"report-{time.monotonic_ns()}.json"
    flags = ["--no-index"] if no_index else []
    for link in (wheels, *links):
        flags += ["--find-links", link]
    ok(sh(*pip(venv, "install", "-q", "--report", report, *flags, *reqs), timeout=1200))
    items = json.loads(report.read_text())["install"]
    for item in items:
        name, url = item["metadata"]["name"], item["download_info"]["url"]
        if name.startswith("prl"):
            assert url.startswith(wheels.as_uri() + "/") or any(url.startswith(Path(x).as_uri()) for x in links), url
            assert not item["download_info"].get("dir_info", {}).get("editable"), name
    return items


def plugins(venv: Path) -> dict[str, dict]:
    rows = json.loads(ok(sh(venv / "bin" / "prl", "plugins", "--json")))
    return {row["distribution"]: row for row in rows}


def wheel_metadata(wheel: Path) -> tuple[list[str], bool]:
    """(Requires-Dist lines, whether it has a `prl` entry point) of one wheel file."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        eps = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        has_ep = bool(eps) and "[prl]" in zf.read(eps[0]).decode()
    return [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")], has_ep


# --- fast: the pack rules -------------------------------------------------------------------


def test_packs_and_lockstep_versions_are_in_sync():
    """packages/prl/pyproject.toml and every member's version and prl-* ranges match what
    `make packs` would write (a new member or a version bump is one command away)."""
    result = subprocess.run([sys.executable, ROOT / "packages" / "sync.py", "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_discovery_places_members_by_their_dependencies():
    def member(name, *deps, extras=()):
        return sync.Member(name, f"x/{name}", [Requirement(d) for d in deps], set(extras))

    members = {
        "prl-core": member("prl-core", "pydantic"),
        "prl-algo-a": member("prl-algo-a", "prl-core"),
        "prl-loss-common": member("prl-loss-common", "prl-core", "torch>=2"),
        "prl-loss-b": member("prl-loss-b", "prl-loss-common"),  # torch only through a member
        "prl-monitor-w": member("prl-monitor-w", "prl-core", "wandb"),
        "prl-weights-fs": member("prl-weights-fs", "prl-core", extras=["trainer"]),
        "prl-weights-x": member("prl-weights-x", "prl-core"),
    }
    packs = {"orchestrator": [], "trainer": ["prl-weights-x[fast]"], "wandb": ["prl-monitor-*"], "s": ["prl-x"]}
    out, notes = sync.resolve(packs, {"torch"}, members)
    assert set(out["orchestrator"]) == {"prl-core", "prl-algo-a", "prl-weights-fs", "prl-weights-x"}
    assert set(out["trainer"]) == set(members) - {"prl-monitor-w"}
    # a member's own `trainer` extra is discovered; a pack entry adds the extras it names
    assert out["trainer"]["prl-weights-fs"] == {"trainer"} and out["orchestrator"]["prl-weights-fs"] == set()
    assert out["trainer"]["prl-weights-x"] == {"fast"} and out["orchestrator"]["prl-weights-x"] == set()
    assert set(out["wandb"]) == {"prl-monitor-w"} and out["s"] == {}
    assert notes == ["pack 's': no member provides 'prl-x' yet; left out"]
    assert sync.lockstep_range("0.1.0") == ">=0.1.0,<0.2" and sync.lockstep_range("1.4.2") == ">=1.4.2,<1.5"


# --- slow: fresh venvs from the wheels ------------------------------------------------------


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """`make wheels` into a fresh folder; PRL_TEST_WHEELS names a folder already built instead."""
    if os.environ.get("PRL_TEST_WHEELS"):
        out = Path(os.environ["PRL_TEST_WHEELS"]).resolve()
        assert list(out.glob("prl-*.whl")), f"PRL_TEST_WHEELS={out} has no prl wheel; run make wheels"
        return out
    out = tmp_path_factory.mktemp("wheels")
    with phase("make wheels"):
        ok(sh("make", "-s", "wheels", f"WHEELS={out}", f"VENV={Path(sys.prefix)}", cwd=ROOT, timeout=900))
    return out


@pytest.fixture(scope="module")
def default_venv(wheels, tmp_path_factory) -> Path:
    venv = new_venv(tmp_path_factory.mktemp("venvs") / "default")
    with phase("pip install prl (fresh venv, torch-free)"):
        installed = install(venv, wheels, "prl")
    venv.joinpath("installed.json").write_text(json.dumps(sorted(i["metadata"]["name"] for i in installed)))
    return venv


@pytest.mark.slow
def test_the_default_install_has_no_torch_and_lists_exactly_its_plugins(default_venv, wheels):
    requires, _ = wheel_metadata(next(wheels.glob("prl-*.whl")))
    default = {Requirement(r).name for r in requires if "extra ==" not in r}
    with_plugins = set()
    for name in default:
        [wheel] = wheels.glob(f"{name.replace('-', '_')}-*.whl")
        with_plugins |= {name} if wheel_metadata(wheel)[1] else set()
    installed = set(json.loads(default_venv.joinpath("installed.json").read_text()))
    assert {n for n in installed if n.startswith("prl-")} == default
    assert "torch" not in installed
    probe = "import importlib.util as u; print(u.find_spec('torch') is None)"
    assert ok(sh(default_venv / "bin" / "python", "-c", probe)).strip() == "True"
    assert set(plugins(default_venv)) == with_plugins
    assert {"prl-algo-grpo", "prl-tasks-builtin", "prl-monitor-file", "prl-launcher-local"} <= with_plugins
    # the install hints' catalogue comes with the `prl` distribution, not with core
    probe = "from prl.known_plugins import install_hint as h; print(h('trainers', 'torch'))"
    assert "install the distribution 'prl-trainer-torch'" in ok(sh(default_venv / "bin" / "python", "-c", probe))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    pytest.importorskip("prl_model_init")
    from prl_model_init.build import make_model

    return make_model(tmp_path_factory.mktemp("model") / "tiny", preset="tiny")


@pytest.fixture
def inference(tiny_model, tmp_path_factory):
    """A real inference server (torch backend, tiny model) started from the dev venv."""
    root, model = tmp_path_factory.mktemp("inference"), tiny_model
    ready, log = root / "ready", open(root / "inference.log", "wb")
    argv = [sys.executable, "-m", "prl", "inference", "--model.name", str(model), "--server.port", "0"]
    proc = subprocess.Popen(argv, env={**os.environ, "PRL_READY_FILE": str(ready)}, stdout=log, stderr=log)
    deadline = time.monotonic() + 180
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, (root / "inference.log").read_text()[-2000:]
        time.sleep(0.2)
    yield model, ready.read_text().strip()
    proc.terminate()
    proc.wait(30)
    log.close()


@pytest.mark.slow
def test_the_orchestrator_extra_runs_a_real_orchestrator_without_torch(default_venv, wheels, inference, tmp_path):
    from prl_weights_filesystem import FilesystemWeights
    from safetensors.torch import load_file

    from prl.config.components import OrchestratorConfig
    from prl.orchestrator.transport import read_batch

    with phase("pip install prl[orchestrator]"):
        added = install(default_venv, wheels, "prl[orchestrator]")
    assert "torch" not in {i["metadata"]["name"] for i in added}
    model, url = inference
    config = {
        "model": {"name": str(model)}, "client": {"base_url": url}, "batch_size": 4, "seq_len": 256, "max_steps": 2,
        "output_dir": str(tmp_path), "run": {"name": "run"}, "weight_broadcast": {"timeout": 120},
        "train": {"group_size": 2, "sampling": {"max_completion_tokens": 8},
                  "source": [{"name": "reverse-text", "env": {"taskset": {"id": "reverse-text"}}}]},
    }  # fmt: skip
    (tmp_path / "orchestrator.json").write_text(json.dumps(config))
    run_dir, got, errors = tmp_path / "run", {}, []

    def trainer():  # stands in for the trainer: reads each batch, publishes the next version
        try:
            transport = FilesystemWeights(OrchestratorConfig.model_validate(config).weight_broadcast, run_dir)
            state = load_file(str(model / "model.safetensors"))
            transport.publish(state, 0)
            for step in (1, 2):
                got[step] = read_batch(run_dir, step, 0, timeout=180)
                transport.publish(state, step)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=trainer, daemon=True)
    thread.start()
    with phase("prl orchestrator, 2 steps"):
        result = sh(default_venv / "bin" / "prl", "orchestrator", "@", tmp_path / "orchestrator.json", timeout=600)
    thread.join(60)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not errors, errors
    assert sorted(got) == [1, 2] and all(any(mb["seq_lens"] for mb in got[s]) for s in got)
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("producer") == "orch" and r.get("step")] == [1, 2]


@pytest.mark.slow
def test_uninstalling_a_plugin_removes_its_tags_and_names_the_distribution(default_venv, wheels, tmp_path):
    before = plugins(default_venv)
    assert before["prl-algo-max-rl"]["registers"] == {"algorithms": ["max_rl"]}
    ok(sh(*pip(default_venv, "uninstall", "-q", "-y", "prl-algo-max-rl")))
    try:
        after = plugins(default_venv)
        assert set(before) - set(after) == {"prl-algo-max-rl"}
        assert all("max_rl" not in tags for row in after.values() for tags in row["registers"].values())
        (tmp_path / "model").mkdir()  # a dry run checks the model directory exists, never loads it
        toml = tmp_path / "rl.toml"
        toml.write_text('max_steps = 1\n[model]\nname = "model"\n[orchestrator.train.algo]\ntype = "max_rl"\n')
        argv = ["rl", "@", toml, "--dry-run", "--output-dir", tmp_path / "runs"]
        result = sh(default_venv / "bin" / "prl", *argv, cwd=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        [line] = [x for x in result.stderr.splitlines() if "orchestrator.train.algo" in x]
        assert "'max_rl' is not installed; install the distribution 'prl-algo-max-rl'" in line
    finally:
        install(default_venv, wheels, "--no-deps", "prl-algo-max-rl", no_index=True)


@pytest.fixture(scope="module")
def third_party(tmp_path_factory) -> dict:
    """A taskset, a renderer and a monitor scaffolded outside the repository, as wheels."""
    from typer.testing import CliRunner

    from prl.cli.main import app
    from prl.scaffold import Names, resolve_kind

    root = tmp_path_factory.mktemp("acme")
    out = root / "wheels"
    made = {}
    with phase("prl new plugin x3 + their wheels"):
        for kind, name in (("taskset", "acme-math"), ("renderer", "acme-chat"), ("monitor", "acme-log")):
            result = CliRunner().invoke(app, ["new", "plugin", kind, name, "--out", str(root / name)])
            assert result.exit_code == 0, result.output
            n = Names(name, resolve_kind(kind))
            made[kind] = (n.dist, n.tag)
        build = ["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out]
        ok(sh(sys.executable, "-m", "pip", *build, *(root / name for name in ("acme-math", "acme-chat", "acme-log"))))
    return {"wheels": out, **made}


def dev_site_view(path: Path) -> Path:
    """The dev venv's third-party packages without any prl distribution (links, not copies)."""
    path.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        low = entry.name.lower()
        if not low.startswith(("prl", "__editable__", "_prl", "pip")) and not low.endswith(".pth"):
            (path / entry.name).symlink_to(entry)
    return path


@pytest.mark.slow
def test_third_party_plugins_from_wheels_are_used_by_prl_rl(wheels, third_party, tiny_model, tmp_path):
    venv = new_venv(tmp_path / "trainer-venv")
    purelib = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (purelib / "_dev_third_party.pth").write_text(f"{dev_site_view(tmp_path / 'dev-site')}\n")
    (_, task), (_, renderer), (_, monitor) = (third_party[k] for k in ("taskset", "renderer", "monitor"))
    dists = [third_party[k][0] for k in ("taskset", "renderer", "monitor")]
    with phase("pip install prl[trainer] + 3 third-party wheels (--no-index)"):
        install(venv, wheels, "prl[trainer]", *dists, no_index=True, links=(third_party["wheels"],))
    listed = plugins(venv)
    assert {d: listed[d]["registers"] for d in dists} == {
        dists[0]: {"tasksets": [task]}, dists[1]: {"renderers": [renderer]}, dists[2]: {"monitors": [monitor]},
    }  # fmt: skip
    model = tiny_model
    orchestrator = {
        # The random tiny model never answers the scaffold's sums, so every group ties at
        # reward 0; keep such batches rather than wait for a signal that never comes.
        "constant_trainer_batch_size": False,
        "renderer": {"name": renderer, "base": "auto", "system_prompt": "ACME-SYSTEM-PROMPT"},
        "train": {"source": [{"name": task, "env": {"taskset": {"id": task}}}]},
    }
    toml = tiny_rl_toml(tmp_path, model, {"orchestrator": orchestrator, "trainer": None, "monitors": {monitor: {}}})
    with phase("prl rl with the third-party plugins, 2 steps"):
        result = sh(venv / "bin" / "prl", "rl", "@", toml, "--run.name", "acme", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[orchestrator] Step 2 |" in result.stdout and "[trainer] Step 2 |" in result.stdout
    run_dir = tmp_path / "outputs" / "acme"
    # The third-party monitor got both processes' rows, with the third-party source's metrics.
    sink = run_dir / "monitors" / monitor
    rows = {p.stem: [json.loads(x) for x in p.read_text().splitlines()] for p in sink.iterdir()}
    assert sorted(rows) == ["orch", "trainer"], sorted(rows)
    assert all({1, 2} <= {r["step"] for r in rs} for rs in rows.values()), rows
    assert any(f"reward/{task}/mean" in r for r in rows["orch"])
    # The third-party taskset ran its episodes (with its own metric), and the third-party
    # renderer rendered them: its system prompt opens every prompt.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    stream = run_dir / "monitors" / "file" / "traces" / "stream"
    traces = [json.loads(x) for p in sorted(stream.glob("*.jsonl")) for x in p.read_text().splitlines()]
    assert traces and all(t["env"] == task and "answer_chars" in t["metrics"] for t in traces)
    rendered = [tokenizer.decode(t["branches"][0]["token_ids"]) for t in traces]
    assert all("ACME-SYSTEM-PROMPT" in text and "What is" in text for text in rendered), rendered[0]
