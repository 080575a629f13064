"""The local hub answers the real huggingface_hub / transformers / datasets clients as the
Hugging Face Hub does: downloads, caching, revisions, gated repos, errors, no network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prl.testing.hub_setup import DEFAULT_SUBSETS, tiny_dataset_dir

hf = pytest.importorskip("huggingface_hub")
errors = pytest.importorskip("huggingface_hub.errors")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    make_model = pytest.importorskip("prl_model_init").make_model
    return make_model(tmp_path_factory.mktemp("tiny") / "model", preset="tiny", seed=0)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _small_repo(root: Path, **files: str) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_snapshot_download_fetches_each_file_once(local_hub, tiny_model):
    local_hub.add_model("org/tiny", tiny_model)
    want = _files(tiny_model)

    planned = hf.snapshot_download("org/tiny", dry_run=True)
    assert {(f.filename, f.file_size, f.will_download) for f in planned} == {(n, len(b), True) for n, b in want.items()}
    assert local_hub.file_downloads() == []

    local_hub.clear_log()
    folder = Path(hf.snapshot_download("org/tiny"))
    assert _files(folder) == want
    assert sorted(local_hub.file_downloads("org/tiny")) == sorted(want)
    # the weights came from the CDN the hub redirected to, as on the real hub
    weights = [r for r in local_hub.log if r.filename == "model.safetensors"]
    assert [(r.method, r.status) for r in weights] == [("HEAD", 302), ("GET", 200)]
    assert weights[1].path.startswith("/lfs/")

    local_hub.clear_log()
    assert Path(hf.snapshot_download("org/tiny")) == folder
    assert local_hub.file_downloads() == []
    assert all(r.method != "GET" or r.path.startswith("/api/") for r in local_hub.log)


def test_transformers_loads_config_and_tokenizer_by_name(local_hub, tiny_model):
    transformers = pytest.importorskip("transformers")
    local_hub.add_model("org/tiny", tiny_model)
    config = transformers.AutoConfig.from_pretrained("org/tiny")
    assert config.hidden_size == transformers.AutoConfig.from_pretrained(tiny_model).hidden_size
    tokenizer = transformers.AutoTokenizer.from_pretrained("org/tiny")
    local = transformers.AutoTokenizer.from_pretrained(tiny_model)
    assert tokenizer("Reverse the text: hello")["input_ids"] == local("Reverse the text: hello")["input_ids"]
    assert "config.json" in local_hub.file_downloads("org/tiny")


def test_gated_repo_needs_the_hub_token(local_hub, tmp_path, monkeypatch):
    local_hub.add_model("org/gated", _small_repo(tmp_path / "g", **{"config.json": "{}"}), gated=True)
    with pytest.raises(errors.GatedRepoError):
        hf.hf_hub_download("org/gated", "config.json")
    with pytest.raises(errors.GatedRepoError):
        hf.snapshot_download("org/gated")
    # the repo's metadata stays public, as on the hub
    assert hf.model_info("org/gated").gated == "auto"

    path = hf.hf_hub_download("org/gated", "config.json", token=local_hub.token)
    assert Path(path).read_text() == "{}"
    monkeypatch.setenv("HF_TOKEN", local_hub.token)
    assert Path(hf.snapshot_download("org/gated", force_download=True), "config.json").read_text() == "{}"

    monkeypatch.setenv("HF_TOKEN", "hf_not_the_token")
    with pytest.raises(errors.HfHubHTTPError) as refused:
        hf.model_info("org/gated")
    assert refused.value.response.status_code == 401


def test_unknown_repo_revision_and_file_raise_the_clients_errors(local_hub, tmp_path):
    local_hub.add_dataset("org/data", _small_repo(tmp_path / "d", **{"a.txt": "a"}))
    with pytest.raises(errors.RepositoryNotFoundError):
        hf.snapshot_download("org/missing")
    with pytest.raises(errors.RepositoryNotFoundError):
        hf.hf_hub_download("org/data", "a.txt")  # a dataset, asked for as a model
    with pytest.raises(errors.RevisionNotFoundError):
        hf.hf_hub_download("org/data", "a.txt", repo_type="dataset", revision="v9")
    with pytest.raises(errors.RevisionNotFoundError):
        hf.snapshot_download("org/data", repo_type="dataset", revision="0" * 40)
    with pytest.raises(errors.EntryNotFoundError):
        hf.hf_hub_download("org/data", "b.txt", repo_type="dataset")


def test_a_bad_repo_directory_is_refused_and_serves_nothing(local_hub, tmp_path):
    with pytest.raises(ValueError, match="missing"):
        local_hub.add_model("org/m", tmp_path / "missing")
    with pytest.raises(ValueError, match="v1"):
        local_hub.add_model("org/m", tmp_path, revisions={"v1": tmp_path}, tags={"v1": tmp_path})
    with pytest.raises(errors.RepositoryNotFoundError):
        hf.model_info("org/m")


def test_tags_branches_and_commit_shas_resolve_to_their_files(local_hub, tmp_path):
    old = _small_repo(tmp_path / "old", **{"config.json": '{"v": 1}', "sub/notes.md": "one"})
    new = _small_repo(tmp_path / "new", **{"config.json": '{"v": 2}'})
    repo = local_hub.add_model("org/m", new, revisions={"dev": new}, tags={"v1": old})
    assert repo.sha("dev") == repo.sha("main") != repo.sha("v1")
    refs = hf.list_repo_refs("org/m")
    assert {(b.name, b.target_commit) for b in refs.branches} == {("main", repo.sha()), ("dev", repo.sha())}
    assert [(t.ref, t.target_commit) for t in refs.tags] == [("refs/tags/v1", repo.sha("v1"))]

    def config(revision: str) -> str:
        return Path(hf.hf_hub_download("org/m", "config.json", revision=revision)).read_text()

    assert config("main") == '{"v": 2}'
    assert config("v1") == config(repo.sha("v1")) == '{"v": 1}'
    assert hf.model_info("org/m", revision="v1").sha == repo.sha("v1")
    old_snapshot = Path(hf.snapshot_download("org/m", revision=repo.sha("v1")))
    assert old_snapshot.name == repo.sha("v1")
    assert (old_snapshot / "sub" / "notes.md").read_text() == "one"
    assert sorted(hf.list_repo_files("org/m", revision="v1")) == ["config.json", "sub/notes.md"]


@pytest.mark.parametrize("file_format", ["jsonl", "parquet"])
def test_load_dataset_by_name_and_subset(local_hub, tmp_path, file_format):
    datasets = pytest.importorskip("datasets")
    local_hub.add_dataset("org/reverse", tiny_dataset_dir(tmp_path / "ds", file_format=file_format))
    train = datasets.load_dataset("org/reverse", split="train")
    assert train.to_list() == DEFAULT_SUBSETS["default"]["train"]
    messages = datasets.load_dataset("org/reverse", "messages", split="train")
    assert messages.to_list() == DEFAULT_SUBSETS["messages"]["train"]
    assert f"data/train-00000-of-00001.{file_format}" in local_hub.file_downloads("org/reverse")


def test_hub_filesystem_lists_and_reads_byte_ranges(local_hub, tmp_path):
    text = "".join(f"line {i}\n" for i in range(200))
    local_hub.add_model("org/m", _small_repo(tmp_path / "m", **{"big.txt": text, "dir/x.txt": "x"}))
    fs = hf.HfFileSystem()
    assert sorted(fs.ls("org/m", detail=False)) == ["org/m/big.txt", "org/m/dir"]
    assert fs.info("org/m/big.txt")["size"] == len(text)
    with fs.open("org/m/big.txt", block_size=64) as f:
        f.seek(100)
        assert f.read(50).decode() == text[100:150]
    assert 206 in {r.status for r in local_hub.log if r.filename == "big.txt"}


def test_hub_down_falls_back_to_the_cache(local_hub, tmp_path):
    local_hub.add_model("org/m", _small_repo(tmp_path / "m", **{"config.json": "{}"}))
    local_hub.add_model("org/never-fetched", tmp_path / "m")
    folder = hf.snapshot_download("org/m")
    local_hub.down()
    assert hf.snapshot_download("org/m") == folder
    assert Path(hf.hf_hub_download("org/m", "config.json")).read_text() == "{}"
    with pytest.raises(errors.LocalEntryNotFoundError):
        hf.snapshot_download("org/never-fetched")
    local_hub.up()
    assert Path(hf.snapshot_download("org/never-fetched"), "config.json").exists()


@pytest.fixture
def shell_settings(monkeypatch):
    """What a developer's shell may hold when the tests start: offline mode and a real token."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("HF_TOKEN", "hf_a_real_users_token")


def test_subprocesses_download_from_the_local_hub(shell_settings, local_hub, tmp_path):
    local_hub.add_model("org/m", _small_repo(tmp_path / "m", **{"config.json": '{"from": "local hub"}'}))
    code = "from huggingface_hub import hf_hub_download; print(hf_hub_download('org/m', 'config.json'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip())
    assert path.read_text() == '{"from": "local hub"}'
    assert path.is_relative_to(os.environ["HF_HUB_CACHE"])
    assert local_hub.file_downloads("org/m") == ["config.json"]
