"""vLLM (CPU) on the tiny-moe preset (Qwen3-MoE, 8 experts, top-2): it loads the model and
scores prompts as a transformers forward does (the trainer's forward), and takes the
trainer's weights, which the trainer publishes in the checkpoint layout (one tensor per
expert), both as a directory the filesystem transport writes and over the nccl transport's
group."""

from __future__ import annotations

import os
import signal
import subprocess

import httpx
import pytest

pytestmark = pytest.mark.vllm

torch = pytest.importorskip("torch")
pytest.importorskip("prl_trainer_torch")
pytest.importorskip("prl_weights_filesystem")

from prl_trainer_torch.common import checkpoint_layout  # noqa: E402
from prl_weights_filesystem.transport import save_safetensors  # noqa: E402

from prl.testing.inference_contract import reference, reference_logprobs  # noqa: E402

ATOL = 1e-3  # vLLM's float32 CPU kernels against a transformers forward
PROMPT = "The quick brown fox jumps"


@pytest.fixture(scope="module")
def moe(tmp_path_factory, server_process):
    pytest.importorskip("vllm")
    from prl_model_init import make_model

    root = tmp_path_factory.mktemp("moe")
    base, other = (str(make_model(root / f"seed{s}", "tiny-moe", seed=s)) for s in (0, 1))
    start_server, api_key = server_process
    proc, url, _, _ = start_server(tmp_path_factory.mktemp("vllm-moe"), base, enable_lora=False)
    try:
        yield {"url": url, "base": base, "other": other, "api_key": api_key}
    finally:
        # as conftest.stop_server: SIGTERM the server's process group, which holds its workers
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _worst(a, b):
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def _score(http: httpx.Client, model: str, prompt: list[int]) -> list[float]:
    sampling = {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
    body = http.post("/inference/v1/generate", json={"token_ids": prompt, "model": model, "sampling_params": sampling})
    assert body.status_code == 200, body.text
    entries = body.json()["prompt_logprobs"][1:]
    return [e[str(t)]["logprob"] for e, t in zip(entries, prompt[1:], strict=True)]


def test_vllm_serves_moe_and_takes_the_trainers_published_weights(moe, tmp_path):
    from transformers import AutoModelForCausalLM

    old_model, tokenizer = reference(moe["base"])
    prompt = tokenizer.encode(PROMPT, add_special_tokens=False)
    old, new = reference_logprobs(old_model, prompt), reference_logprobs(reference(moe["other"])[0], prompt)
    assert _worst(old, new) > 100 * ATOL
    # what the trainer's publish_weights hands the filesystem transport
    hf = AutoModelForCausalLM.from_pretrained(moe["other"], dtype=torch.float32)
    step = tmp_path / "broadcasts" / "step_1"
    step.mkdir(parents=True)
    save_safetensors(checkpoint_layout(hf, hf.state_dict()), step)
    headers = {"Authorization": f"Bearer {moe['api_key']}"}
    with httpx.Client(base_url=moe["url"], timeout=300) as http:
        assert _worst(_score(http, moe["base"], prompt), old) <= ATOL
        resp = http.post("/update_weights", json={"weight_dir": str(step)}, headers=headers)
        assert resp.status_code == 200, resp.text
        assert _worst(_score(http, moe["base"], prompt), new) <= ATOL, "vLLM kept the old experts"
        # the in-memory layout (fused 3-D experts) is not what vLLM loads: refused, nothing changed
        fused = tmp_path / "fused"
        fused.mkdir()
        save_safetensors(AutoModelForCausalLM.from_pretrained(moe["base"]).state_dict(), fused)
        resp = http.post("/update_weights", json={"weight_dir": str(fused)}, headers=headers)
        assert resp.status_code == 400 and "experts.down_proj" in resp.json()["error"]["message"]
        assert http.post("/update_weights", json={"weight_dir": moe["base"]}, headers=headers).status_code == 200
        assert _worst(_score(http, moe["base"], prompt), old) <= ATOL


def test_vllm_takes_an_moe_broadcast(moe):
    pytest.importorskip("prl_weights_nccl")
    from prl_weights_nccl.testing import broadcast_new_policy

    old_model, tokenizer = reference(moe["base"])
    prompt = tokenizer.encode(PROMPT, add_special_tokens=False)
    old, new = reference_logprobs(old_model, prompt), reference_logprobs(reference(moe["other"])[0], prompt)
    got = broadcast_new_policy(moe["url"], moe["base"], moe["api_key"], moe["base"], moe["other"], prompt)
    assert got["sender"] is None and got["version"] == 5
    assert _worst(got["after"][1:], new) <= ATOL, "vLLM kept serving the old experts after the broadcast"
    assert _worst(got["restored"][1:], old) <= ATOL
