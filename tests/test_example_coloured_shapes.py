"""examples/coloured-shapes as docs/vlm.md runs it, shortened.

SFT with images on the tiny VLM, export, and accuracy.py: 60 steps instead of 300 (in the
recorded runs on 2 CPU cores the model named the colour it is shown in 1.00 of the
validation rows from step 40). A run whose images never reached the model would guess: about
0.2 with its own image, the same with a swapped one. Then `prl inference` serves the exported
model and served_accuracy.py asks it over HTTP, images in the chat messages: the torch
engine's greedy replies score exactly as the model does in-process.

RL with images: after 20 SFT steps (0.43 right by first token), 30 RL steps of rl.toml raise
the mean reward of the run's second half over its first five steps by at least 0.12 and to
at least 0.3, where a policy blind to the image gets 0.2 (recorded from about 0.2: 20-step
runs +0.17 over their second half, one on CI +0.12 over its last five steps only; see
docs/vlm.md for the 30-step figure); a trainer or sampler without the images could not."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRL = str(Path(sys.executable).parent / "prl")
EXAMPLE = ROOT / "examples" / "coloured-shapes"
STEPS = 60
RL_STEPS = 30
MARGIN = 0.12
BLIND = 0.2  # the best a guess of one of the five colours does


def _run(*argv: str, log: Path) -> str:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"{argv[:3]} failed; last lines:\n" + "\n".join(log.read_text().splitlines()[-15:])
    return done.stdout


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny VLM and the example's rows."""
    tmp = tmp_path_factory.mktemp("shapes")
    model, data = tmp / "vl", tmp / "data"
    _run(PRL, "model", "init", "--preset", "tiny-qwen3.5-vl", "--out", str(model), log=tmp / "init.log")
    _run(sys.executable, str(EXAMPLE / "sft_data.py"), str(data), log=tmp / "data.log")
    return model, data


def _sft(model: Path, data: Path, runs: Path, steps: int, log: Path) -> Path:
    _run(
        PRL, "sft", "@", str(EXAMPLE / "sft.toml"), "--model.name", str(model),
        "--data.name", str(data / "train.jsonl"), "--val.data.name", str(data / "val.jsonl"),
        "--max-steps", str(steps), "--ckpt.interval", str(steps), "--output-dir", str(runs),
        "--run.name", "sft", "--no-dashboard", log=log,
    )  # fmt: skip
    return runs / "sft" / "checkpoints" / f"step_{steps}"


@pytest.mark.slow
def test_the_example_learns_to_read_the_colour_from_the_image(prepared, tmp_path):
    (model, data), runs = prepared, tmp_path / "runs"
    step = _sft(model, data, runs, STEPS, tmp_path / "sft.log")
    _run(PRL, "export", str(step), str(tmp_path / "out"), "--dtype", "float32", log=tmp_path / "export.log")
    line = _run(
        sys.executable, str(EXAMPLE / "accuracy.py"), str(tmp_path / "out"), str(data / "val.jsonl"),
        log=tmp_path / "accuracy.log",
    ).strip().splitlines()[-1]  # fmt: skip
    own, swapped, same = (float(x) for x in re.findall(r"(\d\.\d\d)", line))
    assert own >= 0.9, line
    assert abs(swapped - same) <= 0.1, line  # the answer follows the image it is shown
    served = _served_accuracy(tmp_path / "out", data / "val.jsonl", tmp_path)
    assert re.findall(r"(\d\.\d\d)", served) == re.findall(r"(\d\.\d\d)", line), served


def _served_accuracy(model: Path, val: Path, tmp_path: Path) -> str:
    """served_accuracy.py against `prl inference` (torch engine) serving the exported model:
    the images go over HTTP, and the served answers score as the model does in-process."""
    from prl.serving import free_port

    port = free_port("127.0.0.1")
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen(
        [PRL, "inference", "--model.name", str(model), "--server.port", str(port)], stdout=log, stderr=log
    )
    try:
        import httpx

        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-2000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        return _run(
            sys.executable, str(EXAMPLE / "served_accuracy.py"), f"http://127.0.0.1:{port}", str(val),
            log=tmp_path / "served.log",
        ).strip().splitlines()[-1]  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def sft20(prepared, tmp_path_factory) -> Path:
    """The example's RL starting point: 20 SFT steps, exported."""
    (model, data), tmp = prepared, tmp_path_factory.mktemp("sft20")
    step = _sft(model, data, tmp / "runs", 20, tmp / "sft.log")
    _run(PRL, "export", str(step), str(tmp / "sft20"), "--dtype", "float32", log=tmp / "export.log")
    return tmp / "sft20"


def _rl(model: Path, runs: Path, steps: int, log: Path, *extra: str, toml: Path = EXAMPLE / "rl.toml") -> list[dict]:
    import json

    _run(
        PRL, "rl", "@", str(toml), "--model.name", str(model),
        "--max-steps", str(steps), "--output-dir", str(runs), "--no-dashboard",
        "--inference.server.port", "0", *extra, log=log,  # a free port: tests run side by side
    )  # fmt: skip
    metrics = runs / "coloured-shapes-rl" / "monitors" / "file" / "metrics.jsonl"
    return [json.loads(line) for line in metrics.read_text().splitlines()]


@pytest.mark.slow
def test_rl_with_images_raises_the_reward_after_a_short_sft(sft20, tmp_path):
    rows = _rl(sft20, tmp_path / "runs", RL_STEPS, tmp_path / "rl.log")
    reward = {r["step"]: r["reward/all/mean"] for r in rows if "reward/all/mean" in r}
    mismatch = [r["mismatch_kl/all/mean"] for r in rows if "mismatch_kl/all/mean" in r]
    # The second half's mean, not the last five steps': one step of 64 rollouts is noisy
    # (a recorded 20-step run went 0.45, 0.40, 0.25 over its last three steps).
    first = sum(reward[s] for s in range(1, 6)) / 5
    half = [reward[s] for s in range(RL_STEPS // 2 + 1, RL_STEPS + 1)]
    assert sum(half) / len(half) - first >= MARGIN, reward
    # Five colours drawn uniformly: a policy blind to the image is right 0.2 of the time at best
    assert sum(half) / len(half) >= BLIND + 0.1, reward
    # the trainer scores the sampled tokens with the images the sampler saw
    assert mismatch[0] < 1e-4 and max(mismatch) < 0.3, mismatch


@pytest.mark.slow
def test_truncated_sampling_with_images_is_replayed_by_the_trainer(sft20, tmp_path):
    """top_p / top_k below 1: the engine ships each token's kept ids, and the trainer scores
    every sampled token over its kept set with the images the sampler saw; with the sampler's
    own weights (step 1) both agree on the sets and the logprobs."""
    rows = _rl(sft20, tmp_path / "runs", 3, tmp_path / "rl.log",
               "--orchestrator.train.sampling.top-p", "0.8", "--orchestrator.train.sampling.top-k", "3")  # fmt: skip
    trainer = [r for r in rows if "mismatch_kl/all/mean" in r]
    assert trainer and "mismatch/sampling_mask" in trainer[0], trainer[:1]
    assert trainer[0]["mismatch/sampling_mask"] < 0.01, trainer[0]
    assert trainer[0]["mismatch_kl/all/mean"] < 1e-4, trainer[0]


@pytest.mark.slow
def test_lora_rl_with_images_trains_an_adapter_on_the_language_model(sft20, tmp_path):
    """[model.lora] with [model.vlm]: the adapter sits on the language model only, the
    engine serves it with the prompts' images (the trainer scores the sampler's tokens alike),
    and the adapter-only checkpoint exports merged into a whole image-text model."""
    import torch

    toml = tmp_path / "rl-lora.toml"
    lora = '\n[model.lora]\nrank = 8\nalpha = 16\ntarget_modules = ["q_proj", "v_proj", "in_proj_qkv", "out_proj"]\n'
    toml.write_text((EXAMPLE / "rl.toml").read_text() + lora)
    rows = _rl(sft20, tmp_path / "runs", 3, tmp_path / "rl.log", "--trainer.optim.lr", "5e-3", toml=toml)
    mismatch = [r["mismatch_kl/all/mean"] for r in rows if "mismatch_kl/all/mean" in r]
    assert len(mismatch) == 3 and mismatch[0] < 1e-4 and max(mismatch) < 0.3, mismatch
    logs = (tmp_path / "runs" / "coloured-shapes-rl" / "logs").glob("**/inference.log")
    served = "".join(log.read_text() for log in logs)
    loaded = re.findall(r"serving LoRA adapter 'prl-lora' from \S+/step_(\d+)", served)
    assert {"1", "2"} <= set(loaded), loaded  # the engine swapped in each trained adapter
    step = tmp_path / "runs" / "coloured-shapes-rl" / "checkpoints" / "step_3"
    out = tmp_path / "merged"
    _run(PRL, "export", str(step), str(out), "--merge-lora", "--dtype", "float32", log=tmp_path / "export.log")
    base, merged = _weights(sft20), _weights(out)
    assert base.keys() == merged.keys()  # a whole image-text model, no adapter left
    changed = {k for k in base if not torch.equal(base[k], merged[k])}
    assert changed and all(".language_model." in k for k in changed), sorted(changed)[:5]
    assert {k.split(".")[-2] for k in changed} == {"q_proj", "v_proj", "in_proj_qkv", "out_proj"}


def _weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out
