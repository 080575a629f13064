"""Hub ids in configs, against a local Hugging Face Hub (prl.testing.hub) that the real
huggingface_hub client talks to: dry runs list and download nothing, `prl fetch` fills the
cache once, and every failure a user meets is one line naming the field, exit 2."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_trainer_torch")

MODEL, DATA = "prl-test/tiny", "prl-test/reverse"  # served by the `hub` fixture (conftest.py)


def _prl(*argv: str):
    return CliRunner().invoke(app, list(argv))


def _sft(tmp_path: Path, *extra: str) -> list[str]:
    return ["sft", "--model.name", MODEL, "--data.name", DATA, "--output-dir", str(tmp_path / "out"), *extra]


def _cached(kind: str, name: str) -> bool:
    from prl import hub

    return hub.local_dir(name, kind) is not None


def test_dry_run_lists_what_a_launch_would_fetch_and_downloads_nothing(hub, tmp_path, hub_repos):
    result = _prl(*_sft(tmp_path, "--dry-run"))
    assert result.exit_code == 0, result.output
    weights = (hub_repos[0] / "model.safetensors").stat().st_size
    model_files = sum(1 for p in hub_repos[0].rglob("*") if p.is_file())
    line = next(x for x in result.output.splitlines() if x.startswith(f"would fetch model {MODEL}"))
    assert f"(model.name): {model_files} files," in line
    assert weights > 100_000 and ("MiB" in line or "KiB" in line)
    assert f"would fetch dataset {DATA} (data.name):" in result.output
    assert "Dry run complete" in result.output
    assert hub.file_downloads() == []
    assert not _cached("model", MODEL) and not _cached("dataset", DATA)


def test_dry_run_exits_0_when_the_hub_cannot_be_reached(hub, tmp_path):
    hub.down()
    result = _prl(*_sft(tmp_path, "--dry-run"))
    assert result.exit_code == 0, result.output
    assert f"would fetch model {MODEL} (model.name): size unknown, the hub did not answer" in result.output


def test_fetch_fills_the_cache_once_and_a_second_fetch_downloads_no_file(hub, tmp_path):
    result = _prl("fetch", *_sft(tmp_path)[1:])
    assert result.exit_code == 0, result.output
    assert _cached("model", MODEL) and _cached("dataset", DATA)
    assert f"model {MODEL} (model.name): " in result.output and "HF_HUB_OFFLINE=1" in result.output
    assert "model.safetensors" in hub.file_downloads(MODEL)
    hub.clear_log()
    again = _prl("fetch", *_sft(tmp_path)[1:])
    assert again.exit_code == 0, again.output
    assert hub.file_downloads() == []


def test_fetch_of_an_rl_config_downloads_only_what_it_names(hub, tmp_path):
    from prl.testing.configs import tiny_rl_toml

    toml = tiny_rl_toml(tmp_path, MODEL)
    result = _prl("fetch", "@", str(toml))
    assert result.exit_code == 0, result.output
    assert _cached("model", MODEL) and not _cached("dataset", DATA)


def test_a_local_path_that_does_not_exist_is_still_one_line(hub, tmp_path):
    for flag, value, said in [
        ("--model.name", "./models/missing", "--model.name: model path './models/missing' does not exist"),
        ("--data.name", "nope.jsonl", "--data.name: dataset path 'nope.jsonl' does not exist"),
        ("--model.name", "a/b/c", "--model.name: 'a/b/c' is neither an existing path nor a Hugging Face repo id"),
    ]:
        result = _prl("sft", flag, value, "--output-dir", str(tmp_path / "out"), "--dry-run")
        assert result.exit_code == 2 and said in result.output, result.output
        assert "Traceback" not in result.output


def _one_line_failure(result, said: str) -> None:
    assert result.exit_code == 2, result.output
    assert said in result.output, result.output
    assert "Traceback" not in result.output
    # besides the error: the line announcing the download and huggingface_hub's progress bar
    lines = [x for x in result.output.splitlines() if x.strip() and not x.startswith(("prl: fetching", "Fetching"))]
    assert len(lines) == 1, result.output


def test_a_repo_that_does_not_exist(hub, tmp_path):
    result = _prl("sft", "--model.name", "prl-test/nope", "--data.name", DATA, "--output-dir", str(tmp_path))
    _one_line_failure(result, "--model.name: model 'prl-test/nope' does not exist on the Hugging Face Hub")
    assert not (tmp_path / "out").exists()


def test_a_gated_repo_needs_a_token(hub, hub_repos, tmp_path, monkeypatch):
    hub.add_model("prl-test/gated", hub_repos[0], gated=True)
    argv = ["fetch", "sft", "--model.name", "prl-test/gated", "--data.name", DATA]
    _one_line_failure(_prl(*argv), "--model.name: 'prl-test/gated' is gated on the Hugging Face Hub")
    monkeypatch.setenv("HF_TOKEN", hub.token)
    assert _prl(*argv).exit_code == 0
    assert _cached("model", "prl-test/gated")


def test_a_revision_that_does_not_exist(hub, tmp_path):
    result = _prl("fetch", *_sft(tmp_path, "--data.revision", "v9")[1:])
    _one_line_failure(result, "--data.revision: revision 'v9' of dataset 'prl-test/reverse' does not exist")


def test_offline_with_the_name_not_cached(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = _prl(*_sft(tmp_path))
    _one_line_failure(result, f"--model.name: model '{MODEL}' is not in the Hugging Face cache")
    assert "HF_HUB_OFFLINE is set" in result.output
    assert hub.log == []


def test_no_network_with_the_name_not_cached(hub, tmp_path):
    hub.down()
    result = _prl(*_sft(tmp_path))
    _one_line_failure(result, f"--model.name: model '{MODEL}' is not in the Hugging Face cache")
    assert "the hub did not answer" in result.output


def _limit_file_size() -> None:
    # Files over 64 KiB fail with EFBIG, as on a full disk (Python ignores SIGXFSZ).
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_the_disk_filling_during_a_download_is_one_line_and_leaves_nothing_used(hub, tmp_path):
    argv = [sys.executable, "-m", "prl", "fetch", "sft", "--model.name", MODEL, "--data.name", DATA]
    full = subprocess.run(argv, capture_output=True, text=True, preexec_fn=_limit_file_size, timeout=120)
    assert full.returncode == 2, full.stdout + full.stderr
    assert f"--model.name: the disk filled while downloading '{MODEL}'" in full.stderr + full.stdout
    assert "Traceback" not in full.stderr
    # The half-written snapshot is never taken for a cached model; the next fetch completes it.
    assert not _cached("model", MODEL)
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _cached("model", MODEL)


def test_doctor_says_what_the_launch_will_do(hub, tmp_path):
    from prl.testing.configs import tiny_rl_toml

    toml = tiny_rl_toml(tmp_path, MODEL)
    result = _prl("doctor", "@", str(toml))
    assert f"ok       model.name: the launch will download '{MODEL}'" in result.output, result.output
    hub.down()
    result = _prl("doctor", "@", str(toml))
    assert f"PROBLEM  model.name: '{MODEL}' is not in the Hugging Face cache" in result.output, result.output
