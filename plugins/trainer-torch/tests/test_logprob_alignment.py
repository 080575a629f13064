"""On-policy alignment: the trainer's per-token log-probs equal the inference engine's.

Completions are sampled by the real torch inference engine (in-process, float32, CPU) from
the same tiny checkpoint the trainer loads, then packed by the orchestrator's packer and run
through the trainer's own path (``to_micro_batch`` -> ``token_logprobs`` / the RL step).
With no weight update in between the batch is exactly on-policy, so every sampled token
must get the same log-prob on both sides. A user would see a misalignment as a large
``mismatch_kl`` and importance ratios far from 1 on every step of an otherwise healthy run:
pairing logits at position t with token t instead of t + 1 costs ~0.4 nats per token here.
"""

from __future__ import annotations

import threading

import pytest
import torch

pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_loss_ipo")

from prl_inference_torch.engine import GenParams, Request  # noqa: E402
from prl_inference_torch.loading import load_state  # noqa: E402
from prl_trainer_torch.alignment import Sampled, logprob_gaps, packed_batch  # noqa: E402
from prl_trainer_torch.model import Dist, load_hf_model, parallelize  # noqa: E402
from prl_trainer_torch.rl_step import reduce_stats, run_micro_batches, to_micro_batch, token_logprobs  # noqa: E402

from prl.config.components import InferenceConfig, TrainerConfig  # noqa: E402

# Two prompts of different lengths, sampled at two temperatures: the second document in the
# packed row checks that alignment also holds past a document boundary and that each token
# is scored at its own temperature.
PROMPTS = ([256, 10, 20, 30, 40, 257], [256, 11, 12, 257])
TEMPERATURES = (1.0, 0.7)
MAX_TOKENS = 12


def _sample_on_policy(model_dir) -> list[Sampled]:
    """Each prompt's completion with the engine's log-probs."""
    backend = {"type": "torch", "device": "cpu", "dtype": "float32", "max_batch_size": 2, "num_threads": 1}
    cfg = InferenceConfig.model_validate({"model": {"name": str(model_dir)}, "backend": backend})
    state = load_state(cfg, api_key=None)
    try:
        reqs = []
        for i, (prompt, temp) in enumerate(zip(PROMPTS, TEMPERATURES, strict=True)):
            req = Request(list(prompt), GenParams(max_tokens=MAX_TOKENS, temperature=temp, seed=i, ignore_eos=True))
            done = threading.Event()
            req.wake = lambda d=done, r=req: d.set() if r.done else None
            state.engine.submit(req)
            reqs.append((req, done))
        out = []
        for i, ((req, done), temp) in enumerate(zip(reqs, TEMPERATURES, strict=True)):
            assert req.done or done.wait(60), "inference engine did not finish"
            (comp,) = req.completions
            assert len(comp.token_ids) == MAX_TOKENS == len(comp.logprobs)
            out.append(Sampled(req.prompt_ids, comp.token_ids, comp.logprobs, temp, env=f"env{i}"))
        return out
    finally:
        state.engine.shutdown()


@pytest.fixture(scope="module")
def on_policy_batch(tiny_model):
    # One rank, one micro-batch holding both documents.
    return packed_batch(_sample_on_policy(tiny_model), seq_len=64)


@pytest.fixture(scope="module")
def policy(tiny_model):
    hf = load_hf_model(str(tiny_model), torch.float32, "auto")
    return parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=False, compile=False)


def test_trainer_logprobs_equal_inference_logprobs_per_token(policy, on_policy_batch):
    mb = on_policy_batch
    assert int(mb.loss_mask.sum()) == MAX_TOKENS * len(PROMPTS)
    trainer, inference = logprob_gaps(policy, mb)
    diff = (trainer - inference).abs()
    assert float(diff.max()) < 1e-3, (
        f"trainer vs inference log-probs differ by up to {float(diff.max()):.3f} nats "
        f"(mean {float(diff.mean()):.3f}); trainer={trainer.tolist()} inference={inference.tolist()}"
    )
    # Tokens outside the loss (prompts, document starts) carry no log-prob of their own.
    with torch.no_grad():
        logp, _ = token_logprobs(policy, mb)
    assert torch.all(logp[mb.position_ids == 0] == 0)


def test_rl_step_reports_zero_mismatch_kl_on_policy(policy, on_policy_batch):
    # The user-facing symptom: mismatch_kl as the RL step logs it, overall and per env.
    loss_fn = TrainerConfig.model_validate({"loss": {"type": "ipo"}}).loss.build()
    stats = run_micro_batches(policy, loss_fn, [on_policy_batch], world=1)
    policy.zero_grad(set_to_none=True)
    metrics = reduce_stats(stats, world=1)
    for key in ("mismatch_kl/all/mean", "mismatch_kl/env0/mean", "mismatch_kl/env1/mean"):
        assert abs(metrics[key]) < 1e-6, (key, metrics[key])


def test_a_sampling_mask_out_of_step_with_the_tokens_is_one_line():
    """The packer must align one kept-id list with every token; anything else is named."""
    from prl.config.errors import ConfigError

    raw = {"input_ids": [5, 6, 7], "sampling_mask": [[1, 2]], "position_ids": [0, 1, 2], "env_names": ["e"]}
    with pytest.raises(ConfigError) as err:
        to_micro_batch(raw, torch.device("cpu"))
    assert str(err.value) == (
        "sampling_mask: 1 entries for 3 tokens; the rollout packer must align one kept-id list with every token"
    )
