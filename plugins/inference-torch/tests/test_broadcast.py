"""The torch backend receives a version over the nccl transport's group (gloo on CPU) and
then serves it: its prompt scores become the broadcast model's, and the version is the one
the trainer sent."""

from __future__ import annotations

import pytest

pytest.importorskip("prl_weights_nccl")

from prl_weights_nccl.testing import broadcast_new_policy  # noqa: E402

from prl.testing.inference_contract import InferenceServer, reference, reference_logprobs  # noqa: E402

ATOL = 1e-4


def test_a_broadcast_version_is_served(inference_server: InferenceServer, tmp_path):
    from prl_model_init import make_model

    new_dir = str(make_model(tmp_path / "seed1", preset="tiny", seed=1))
    old_model, tokenizer = reference(inference_server.model_dir)
    prompt = tokenizer.encode("The quick brown fox", add_special_tokens=False)
    old, new = reference_logprobs(old_model, prompt), reference_logprobs(reference(new_dir)[0], prompt)
    got = broadcast_new_policy(
        inference_server.base_url, inference_server.name, None, inference_server.model_dir, new_dir, prompt
    )
    assert got["sender"] is None and got["version"] == 5
    assert max(abs(a - b) for a, b in zip(got["before"][1:], old, strict=True)) <= ATOL
    assert max(abs(a - b) for a, b in zip(got["after"][1:], new, strict=True)) <= ATOL
    assert max(abs(a - b) for a, b in zip(got["restored"][1:], old, strict=True)) <= ATOL


def test_broadcast_routes_refuse_bad_requests_in_one_line(inference_server: InferenceServer):
    import httpx

    with httpx.Client(base_url=inference_server.base_url, timeout=30) as http:
        bad = http.post("/init_broadcaster", json={"host": "127.0.0.1", "port": 0, "rank_offset": 1})
        assert bad.status_code == 400 and "port" in bad.json()["error"]["message"]
