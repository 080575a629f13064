"""The torch engine's server on the tiny-moe preset (Qwen3-MoE, 8 experts, top-2): it serves
the model, and takes new weights in the checkpoint layout the trainer publishes and
``save_pretrained`` writes (one tensor per expert) through a directory and through the nccl
transport's group. A directory that does not fill every expert is a 400 and changes
nothing. (The conversion itself: engine/test_weights_moe.py.)"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import httpx
import pytest
from safetensors.torch import load_file, save_file

from prl.client import InferenceHTTPClient
from prl.testing.inference_contract import reference, reference_logprobs

ATOL = 1e-4
PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[str, str]:
    """(served tiny-moe, another seed of it)."""
    from prl_model_init import make_model

    root = tmp_path_factory.mktemp("moe")
    return str(make_model(root / "seed0", "tiny-moe", seed=0)), str(make_model(root / "seed1", "tiny-moe", seed=1))


@pytest.fixture(scope="module")
def server(models, tmp_path_factory, server_process):
    start_server, stop_server = server_process
    backend = {"max_batch_size": 4, "max_prefill_tokens": 256, "dtype": "float32", "num_threads": 1}
    cfg = {"model": {"name": models[0]}, "server": {"port": 0}, "backend": backend}
    proc, url = start_server(cfg, tmp_path_factory.mktemp("moe-server"))
    yield url
    stop_server(proc)


def _scores(url: str, model: str, prompt: list[int], weight_dir: str | None, restore: str) -> tuple:
    async def go():
        async with InferenceHTTPClient(url, model=model, timeout=120) as c:
            before = await c.score(prompt)
            version = await c.update_weights(weight_dir)
            try:
                return before, version, await c.score(prompt)
            finally:
                await c.update_weights(restore)

    return asyncio.run(go())


def test_serves_moe_and_takes_the_published_layout(server, models, tmp_path):
    old_model, tokenizer = reference(models[0])
    prompt = tokenizer.encode(PROMPT, add_special_tokens=False)
    old, new = reference_logprobs(old_model, prompt), reference_logprobs(reference(models[1])[0], prompt)
    assert max(abs(a - b) for a, b in zip(old, new, strict=True)) > 100 * ATOL
    broadcast = tmp_path / "broadcasts" / "step_1"
    broadcast.mkdir(parents=True)
    shutil.copy(Path(models[1]) / "model.safetensors", broadcast / "model.safetensors")  # bare safetensors
    before, version, after = _scores(server, models[0], prompt, str(broadcast), models[0])
    assert max(abs(a - b) for a, b in zip(before[1:], old, strict=True)) <= ATOL
    assert max(abs(a - b) for a, b in zip(after[1:], new, strict=True)) <= ATOL
    assert version >= 1


def test_a_partial_checkpoint_is_a_400_and_changes_nothing(server, models, tmp_path):
    files = load_file(str(Path(models[1]) / "model.safetensors"))
    del files["model.layers.0.mlp.experts.0.gate_proj.weight"]
    save_file(files, str(tmp_path / "model.safetensors"))
    with httpx.Client(base_url=server, timeout=60) as http:
        version = http.get("/health").json()["version"]
        resp = http.post("/update_weights", json={"weight_dir": str(tmp_path)})
        assert resp.status_code == 400 and "experts.gate_up_proj" in resp.json()["error"]["message"]
        assert http.get("/health").json()["version"] == version


def test_a_broadcast_in_the_checkpoint_layout_is_served(server, models):
    pytest.importorskip("prl_weights_nccl")
    from prl_weights_nccl.testing import broadcast_new_policy

    old_model, tokenizer = reference(models[0])
    prompt = tokenizer.encode(PROMPT, add_special_tokens=False)
    old, new = reference_logprobs(old_model, prompt), reference_logprobs(reference(models[1])[0], prompt)
    got = broadcast_new_policy(server, models[0], None, models[0], models[1], prompt)
    assert got["sender"] is None and got["version"] == 5
    assert max(abs(a - b) for a, b in zip(got["after"][1:], new, strict=True)) <= ATOL
    assert max(abs(a - b) for a, b in zip(got["restored"][1:], old, strict=True)) <= ATOL
