"""On-policy alignment against real vLLM: the trainer's log-probs equal the server's.

The session's vLLM server (float32, CPU) samples completions from the tiny checkpoint; the
trainer loads the same checkpoint and scores them through its own path (the orchestrator's
packer, ``to_micro_batch``, ``token_logprobs``). Nothing was updated in between, so every
sampled token must get the same log-prob on both sides. A gap here is what a user would see
as ``mismatch_kl`` and importance ratios away from 1 on every step of a vLLM-backed run.
"""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.vllm

torch = pytest.importorskip("torch")
pytest.importorskip("prl_trainer_torch")

from prl_loss_common import mismatch_kl  # noqa: E402
from prl_trainer_torch.alignment import Sampled, logprob_gaps, packed_batch  # noqa: E402
from prl_trainer_torch.model import Dist, load_hf_model, parallelize  # noqa: E402

# Two prompts of different lengths at two temperatures: the second packed document checks
# alignment past a document boundary, and each token is scored at its own temperature.
PROMPTS = ([256, 10, 20, 30, 40, 257], [256, 11, 12, 257])
TEMPERATURES = (1.0, 0.7)
MAX_TOKENS = 12


def _sample(url: str, model: str) -> list[Sampled]:
    out = []
    with httpx.Client(base_url=url, timeout=120) as http:
        for i, (prompt, temp) in enumerate(zip(PROMPTS, TEMPERATURES, strict=True)):
            sampling = {"max_tokens": MAX_TOKENS, "temperature": temp, "seed": i, "ignore_eos": True}
            resp = http.post(
                "/inference/v1/generate", json={"token_ids": list(prompt), "model": model, "sampling_params": sampling}
            )
            assert resp.status_code == 200, resp.text
            (choice,) = resp.json()["choices"]
            logprobs = [e["logprob"] for e in choice["logprobs"]["content"]]
            assert len(choice["token_ids"]) == MAX_TOKENS == len(logprobs)
            out.append(Sampled(list(prompt), choice["token_ids"], logprobs, temp, env=f"env{i}"))
    return out


def test_trainer_logprobs_equal_vllm_logprobs_per_token(vllm_server):
    model_dir = str(vllm_server["model_dir"])
    batch = packed_batch(_sample(vllm_server["url"], model_dir), seq_len=64)
    hf = load_hf_model(model_dir, torch.float32, "auto")
    policy = parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=False, compile=False)
    trainer, inference = logprob_gaps(policy, batch)
    assert trainer.numel() == MAX_TOKENS * len(PROMPTS)
    diff = (trainer - inference).abs()
    assert float(diff.max()) < 1e-3, (
        f"trainer vs vLLM log-probs differ by up to {float(diff.max()):.4f} nats (mean {float(diff.mean()):.4f}); "
        f"trainer={trainer.tolist()} vllm={inference.tolist()}"
    )
    # The figure a user watches, computed as the RL step does.
    kl = float(mismatch_kl(trainer - inference).sum()) / trainer.numel()
    assert abs(kl) < 1e-6, kl
