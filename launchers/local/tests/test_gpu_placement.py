"""GPUs of a local run: where ``[deployment]`` puts inference and trainer, overlap only with
``shared_gpus``, and ``prl rl --dry-run`` refusing a config that asks for GPUs this machine
does not have (one line, exit 2), with the count faked and with this machine's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prl_launcher_local.launcher import LocalLauncher

from prl.config.errors import ConfigError
from prl.contracts.launcher import ProcessSpec
from prl.gpus import check_deployment, visible_gpus

Config = LocalLauncher.Config


def _placed(config: Config, role: str) -> str | None:
    spec = ProcessSpec(role, ["true"], Path("/dev/null"), role=role)
    return LocalLauncher(config, Path("/tmp"))._placed(spec).env.get("CUDA_VISIBLE_DEVICES")


def test_inference_gets_the_first_gpus_and_the_trainer_the_next(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = Config(num_infer_gpus=2, num_train_gpus=2)
    assert (_placed(config, "inference"), _placed(config, "trainer")) == ("0,1", "2,3")
    assert _placed(config, "orchestrator") is None
    # Under a CUDA_VISIBLE_DEVICES of the launcher's own, ids index into it.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert (_placed(config, "inference"), _placed(config, "trainer")) == ("4,5", "6,7")


def test_explicit_ids_overlap_only_in_shared_mode():
    with pytest.raises(ValueError, match=r"overlap on \[1\].*deployment.shared_gpus = true"):
        Config(infer_gpu_ids=[0, 1], train_gpu_ids=[1])
    shared = Config(infer_gpu_ids=[0, 1], train_gpu_ids=[1], shared_gpus=True)
    assert (shared.num_infer_gpus, shared.num_train_gpus, shared.gpu_ids()) == (2, 1, {0, 1})
    # Counts alone in shared mode: both start at GPU 0.
    assert Config(num_infer_gpus=1, num_train_gpus=1, shared_gpus=True).placement() == ([0], [0])
    with pytest.raises(ValueError, match=r"num_train_gpus \(2\) differs from len\(train_gpu_ids \[3\]\)"):
        Config(num_train_gpus=2, train_gpu_ids=[3])


@pytest.mark.parametrize(
    ("env", "want"),
    [({"PRL_GPU_COUNT": "8"}, 8), ({"CUDA_VISIBLE_DEVICES": "2,3"}, 2), ({"CUDA_VISIBLE_DEVICES": ""}, 0)],
)
def test_the_gpu_count_comes_from_the_environment_without_torch(monkeypatch, env, want):
    for var in ("PRL_GPU_COUNT", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert visible_gpus()[0] == want


def test_a_deployment_beyond_the_machine_is_one_line(monkeypatch):
    monkeypatch.setenv("PRL_GPU_COUNT", "4")
    check_deployment(Config(num_infer_gpus=2, num_train_gpus=2))
    with pytest.raises(ConfigError) as err:
        check_deployment(Config(num_infer_gpus=4, num_train_gpus=2))
    assert str(err.value) == (
        "--deployment.num-infer-gpus: num_infer_gpus (4) + num_train_gpus (2) place processes on GPU ids 0-5, "
        "but this machine has 4 GPU(s) ($PRL_GPU_COUNT)"
    )


def _toml(tmp_path: Path, deployment: str) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}))
    (model / "tokenizer_config.json").write_text(json.dumps({"prl_renderer": "qwen3"}))
    toml = tmp_path / "rl.toml"
    body = f'''
        output_dir = "{tmp_path / "out"}"
        [run]
        name = "gpus"
        [model]
        name = "{model}"
        [[orchestrator.train.source]]
        name = "reverse-text"
        env.taskset.id = "reverse-text"
        [deployment]
    '''
    toml.write_text(textwrap.dedent(body) + textwrap.dedent(deployment))
    return toml


def _dry_run(toml: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PRL_GPU_COUNT", "CUDA_VISIBLE_DEVICES")}
    argv = [sys.executable, "-m", "prl", "rl", "@", str(toml), "--dry-run"]
    return subprocess.run(argv, capture_output=True, text=True, env={**clean, **env}, timeout=120)


@pytest.mark.slow
def test_dry_run_refuses_gpus_this_machine_lacks(tmp_path):
    """On this machine as it is (no GPU here: nvidia-smi absent or listing fewer)."""
    have, _ = visible_gpus()
    toml = _toml(tmp_path, f"type = 'single_node'\nnum_infer_gpus = {have + 1}\n")
    proc = _dry_run(toml)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert any(f"num_infer_gpus ({have + 1})" in line and f"has {have} GPU(s)" in line for line in lines)
    assert "Traceback" not in proc.stderr and not (tmp_path / "out" / "gpus").exists()
    # The same config on a machine with enough GPUs dry-runs to the end.
    ok = _dry_run(toml, PRL_GPU_COUNT=str(have + 1))
    assert ok.returncode == 0 and "Dry run complete" in ok.stdout, ok.stderr
    resolved = tmp_path / "out" / "gpus" / "configs" / "latest" / "resolved"
    assert json.loads((resolved / "inference.json").read_text())["server"]["engines"] == have + 1


@pytest.mark.slow
def test_dry_run_gives_the_trainer_one_rank_per_train_gpu_and_inference_one_engine_per_gpu(tmp_path):
    toml = _toml(tmp_path, "num_infer_gpus = 2\nnum_train_gpus = 2\n")
    proc = _dry_run(toml, PRL_GPU_COUNT="4")
    assert proc.returncode == 0, proc.stderr
    resolved = tmp_path / "out" / "gpus" / "configs" / "latest" / "resolved"
    read = lambda name: json.loads((resolved / f"{name}.json").read_text())  # noqa: E731
    assert read("trainer")["num_workers"] == 2 and read("orchestrator")["num_train_workers"] == 2
    assert read("inference")["server"]["engines"] == 2
