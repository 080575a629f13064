"""Every TOML config a user can copy (the ```toml blocks of docs/ and of the spec beside
the repository, and examples/**/*.toml) resolves with --dry-run on an empty Hugging Face
cache: hub names are listed for download, never refused. Local paths the examples' own
flow creates first (models/tiny, data/...) are made here, as that flow would."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prl.cli.main import app
from prl.config.errors import ConfigError

pytest.importorskip("prl_model_init")

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT.parent / "shared" / "spec"
# Blocks that are not prl run configs: packaging metadata, and blocks a page marks with
# `<!-- not-a-run-config: why -->` on the line above (a fragment, another file's format, a
# taskset the page itself writes).
NOT_A_RUN_CONFIG = re.compile(r"^\[(project|build-system|tool)\b", re.M)
BLOCK = re.compile(r"(<!-- not-a-run-config: (.+?) -->\n)?```toml\n(.*?)```", re.S)
LOCAL = re.compile(r"""["']((?:models|data|outputs)/[\w./-]+)["']""")


def _snippets() -> list[tuple[str, str]]:
    out = [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "examples").rglob("*.toml"))]
    pages = sorted((ROOT / "docs").glob("*.md")) + (sorted(SPEC.glob("*.md")) if SPEC.is_dir() else [])
    for page in pages:
        for i, (_, why, block) in enumerate(BLOCK.findall(page.read_text())):
            if not why and not NOT_A_RUN_CONFIG.search(block):
                out.append((f"{page.name}#{i + 1}", block))
    return out


SNIPPETS = _snippets()


@pytest.fixture
def eight_gpus(tmp_path, monkeypatch):
    """An `nvidia-smi` listing eight GPUs, for the examples of multi-GPU deployments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lines = "".join(f"echo 'GPU {i}: NVIDIA H200 (UUID: GPU-{i})'\n" for i in range(8))
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n" + lines)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from prl_model_init.build import make_model

    return Path(make_model(tmp_path_factory.mktemp("tiny") / "model", preset="tiny"))


def _make_local_paths(text: str, cwd: Path, tiny: Path) -> None:
    """The local models and data files a snippet names, made as the examples' flow makes them."""
    for rel in LOCAL.findall(text):
        path = cwd / rel
        if path.exists() or rel.startswith("outputs/"):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.startswith("models/") and "-vl" in Path(rel.rstrip("/")).name:
            from prl_model_init.build import make_model  # [model.vlm] needs a vision-language model

            make_model(path, preset="tiny-qwen3.5-vl")
        elif rel.startswith("models/") or rel.endswith("/weights"):
            path.symlink_to(tiny, target_is_directory=True)
        elif Path(rel).suffix in {".jsonl", ".json"}:
            path.write_text('{"prompt": "a", "completion": "b"}\n')
        else:
            path.mkdir(parents=True)


def _kind(file: Path) -> str:
    from prl.cli.fetch_cmd import _roots
    from prl.config.resolve import resolve

    errors = []
    for kind, root in _roots().items():
        try:
            resolve(root, ["@", str(file)])
            return kind
        except ConfigError as exc:
            errors.append(f"{kind}: {exc.message.splitlines()[-1]}")
    raise AssertionError("valid as no root config: " + " | ".join(errors))


def test_the_walk_finds_the_examples():
    names = {name for name, _ in SNIPPETS}
    assert {"examples/reverse-text/gpu/rl.toml", "examples/reverse-text/gpu/sft.toml"} <= names
    assert len(SNIPPETS) >= 40


@pytest.mark.parametrize(("name", "text"), SNIPPETS, ids=[n for n, _ in SNIPPETS])
def test_config_example_dry_runs_on_an_empty_cache(name, text, tiny, eight_gpus, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    monkeypatch.chdir(tmp_path)
    _make_local_paths(text, tmp_path, tiny)
    file = tmp_path / "cfg.toml"
    file.write_text(text)
    kind = _kind(file)
    argv = [kind, "@", str(file), "--output-dir", str(tmp_path / "out")]
    result = CliRunner().invoke(app, [*argv, "--dry-run"])
    assert result.exit_code == 0, f"prl {kind} @ {name} --dry-run:\n{result.output}"
    assert "Traceback" not in result.output
    assert not any((tmp_path / "empty-hf-cache").glob("*/snapshots/*")), "a dry run downloaded something"
