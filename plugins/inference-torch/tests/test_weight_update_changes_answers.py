"""After /update_weights the server answers with the new policy, not the one it started with.

The weights are a second tiny model (another seed) laid out the way the filesystem weight
transport publishes them: bare safetensors in ``<run_dir>/broadcasts/step_N``, no config or
tokenizer. A server that acknowledged the update but kept its old parameters would still
answer fine and bump the version; the test catches it by checking the greedy answer and the
logprobs against a float32 transformers forward of the new weights, and that they are no
longer the old policy's.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from prl.client import InferenceHTTPClient
from prl.testing.inference_contract import InferenceServer, reference, reference_logprobs
from prl.types import Sampling

ATOL = 1e-4  # the torch backend's contract tolerance (float32 server, float32 reference)
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def new_policy(tmp_path_factory) -> tuple[str, str]:
    """(reference model dir, broadcast dir) of a tiny model with different random weights."""
    from prl_model_init import make_model

    ref_dir = make_model(tmp_path_factory.mktemp("policy") / "seed1", preset="tiny", seed=1)
    step = tmp_path_factory.mktemp("run") / "broadcasts" / "step_1"
    step.mkdir(parents=True)
    # Only the safetensors travel, as with the filesystem transport; the server must not
    # need (or read) a config from the broadcast directory.
    for f in Path(ref_dir).glob("*.safetensors"):
        shutil.copy(f, step / f.name)
    return str(ref_dir), str(step)


def _greedy(model, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """Greedy continuation and its temperature-1 logprobs under a transformers model."""
    import torch

    ids = list(prompt)
    logprobs = []
    with torch.no_grad():
        for _ in range(n):
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
            tok = int(logp.argmax())
            ids.append(tok)
            logprobs.append(float(logp[tok]))
    return ids[len(prompt) :], logprobs


def _worst(got: list[float], want: list[float]) -> float:
    assert len(got) == len(want)
    return max(abs(a - b) for a, b in zip(got, want, strict=True))


def test_update_weights_serves_the_new_policy(inference_server: InferenceServer, new_policy):
    new_dir, broadcast = new_policy
    old_model, tokenizer = reference(inference_server.model_dir)
    new_model, _ = reference(new_dir)
    prompt = tokenizer.encode("The quick brown fox", add_special_tokens=False)

    old_scores = reference_logprobs(old_model, prompt)
    new_scores = reference_logprobs(new_model, prompt)
    old_answer, _ = _greedy(old_model, prompt, MAX_TOKENS)
    new_answer, new_answer_logprobs = _greedy(new_model, prompt, MAX_TOKENS)
    # The two seeds must give policies a stale server could not pass for.
    assert _worst(old_scores, new_scores) > 100 * ATOL
    assert old_answer != new_answer

    async def go():
        client = InferenceHTTPClient(inference_server.base_url, model=inference_server.name, timeout=120)
        async with client as c:
            before = await c.score(prompt)
            version = await c.update_weights(broadcast)
            try:
                after = await c.score(prompt)
                gen = await c.generate(prompt, Sampling(temperature=0.0, max_tokens=MAX_TOKENS))
            finally:
                # The server fixture is shared by the whole session: put the base weights back.
                await c.update_weights(inference_server.model_dir)
                restored = await c.score(prompt)
            return before, version, after, gen, restored

    before, version, after, gen, restored = asyncio.run(go())

    assert _worst(before[1:], old_scores) <= ATOL, "server did not start on the base policy"
    assert _worst(after[1:], new_scores) <= ATOL, (
        f"prompt logprobs after the update are not the new policy's "
        f"(off by {_worst(after[1:], new_scores):.2e}; from the old policy's by {_worst(after[1:], old_scores):.2e})"
    )
    # The server may stop early at an end token; whatever it produced must be the new
    # policy's greedy answer, token for token, with that policy's logprobs.
    assert gen.token_ids, "empty answer"
    n = len(gen.token_ids)
    assert gen.token_ids == new_answer[:n], f"greedy answer {gen.token_ids}, new policy {new_answer}, old {old_answer}"
    assert _worst(gen.logprobs, new_answer_logprobs[:n]) <= ATOL
    assert gen.version == version
    assert _worst(restored[1:], old_scores) <= ATOL, "restoring the base weights failed"
