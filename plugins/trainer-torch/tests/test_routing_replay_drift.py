"""The issue's test (#35, routing replay): a trainer whose MoE routers have drifted from the
sampler's (its router weights perturbed) reproduces the sampler's logprobs of the tokens it
sampled much better when it routes with the experts the sampler recorded.

Sampler: the torch inference engine on tiny-moe (Qwen3-MoE, 4 layers, 8 experts, top-2)
with return_routed_experts. Its completions go the orchestrator's way (branch, training
sample, packed micro-batch) into the trainer's forward, with model.routing_replay off and
on. Measured on these seeds (CPU, float32): mean |trainer logp − sampler logp| over the
192 sampled tokens (4 prompts x 2 completions x 24) is 0.0373 without replay and 0.0160
with it; mismatch_kl 1.10e-3 and 2.37e-4. Undrifted, both stay at float noise: replaying the recorded experts changes
nothing when they are the trainer's own choice (so they line up with the positions)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from prl_loss_common import mismatch_kl
from prl_trainer_torch.model import Dist, load_hf_model, parallelize
from prl_trainer_torch.moe_layers import routers
from prl_trainer_torch.rl_step import forward_tokens, to_micro_batch
from prl_trainer_torch.routing_replay import RouteReplay

from prl.orchestrator.packing import micro_batch
from prl.orchestrator.samples import trace_to_samples
from prl.tasks.branches import add_sampled, start_branch
from prl.types import Generation, Trace

engine_mod = pytest.importorskip("prl_inference_torch.engine")

DRIFT = 0.5  # router weight noise, in units of each router's weight std


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory) -> Path:
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", "tiny-moe", seed=0)


def _sample(model_dir: Path) -> list[tuple[list[int], Generation]]:
    """Completions of a few prompts from the torch engine, with their routed experts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    engine = engine_mod.Engine(
        model, AutoTokenizer.from_pretrained(str(model_dir)), max_model_len=128, eos_ids=set(), record_routes=True
    )
    prompts = [[5 + i, 40 + 3 * i, 7, 90 - i, 11, 12 + i] for i in range(4)]
    params = engine_mod.GenParams(max_tokens=24, n=2, seed=0, ignore_eos=True)
    reqs = [engine_mod.Request(p, params) for p in prompts]
    engine.start()
    try:
        for r in reqs:
            engine.submit(r)
        deadline = time.monotonic() + 120
        while not all(r.done for r in reqs):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        engine.shutdown()
    out = []
    for r in reqs:
        for c in r.completions:
            out.append((r.prompt_ids, Generation(c.token_ids, c.logprobs, "length", routed_experts=c.routed_experts)))
    return out


def _batch(samples: list[tuple[list[int], Generation]]) -> dict:
    """The completions as the orchestrator packs them (one micro-batch)."""
    train = []
    for i, (prompt, gen) in enumerate(samples):
        branch = start_branch(prompt)
        add_sampled(branch, gen)
        branch.advantages = [1.0] * len(branch.token_ids)
        train += trace_to_samples(Trace(f"t{i}", "task", "env", [branch]), seq_len=4096).samples
    return micro_batch(train)


def _trainer(model_dir: Path, drift: float):
    hf = load_hf_model(str(model_dir), torch.float32, "sdpa")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for r in routers(hf):
            r.weight += drift * r.weight.std() * torch.randn(r.weight.shape, generator=gen)
    return parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=False, compile=False)


def _mismatch(policy, raw: dict) -> tuple[float, float]:
    mb = to_micro_batch(raw, torch.device("cpu"))
    with torch.no_grad():
        logp = forward_tokens(policy, mb).logp
    mask = mb.loss_mask
    diff = (logp - mb.inference_logprobs)[mask]
    mkl = mismatch_kl(logp - mb.inference_logprobs)[mask]
    return diff.abs().mean().item(), mkl.mean().item()


@pytest.fixture(scope="module")
def sampled(tiny_moe) -> dict:
    raw = _batch(_sample(tiny_moe))
    assert len(raw["routed_experts"]) == len(raw["input_ids"]) and sum(raw["loss_mask"]) == 192
    return raw


def _off_and_on(tiny_moe, raw: dict, drift: float) -> tuple[tuple[float, float], tuple[float, float]]:
    policy = _trainer(tiny_moe, drift)
    off = _mismatch(policy, raw)
    policy.route_replay = RouteReplay.of(policy.hf, "tiny-moe")
    return off, _mismatch(policy, raw)


def test_replay_lowers_the_mismatch_of_a_drifted_router(tiny_moe, sampled):
    (abs_off, kl_off), (abs_on, kl_on) = _off_and_on(tiny_moe, sampled, DRIFT)
    assert abs_off == pytest.approx(0.0373, abs=2e-3) and abs_on == pytest.approx(0.0160, abs=2e-3)
    assert kl_off == pytest.approx(1.10e-3, rel=0.1) and kl_on == pytest.approx(2.37e-4, rel=0.1)
    assert abs_on < 0.5 * abs_off and kl_on < 0.3 * kl_off


def test_without_drift_replay_changes_nothing(tiny_moe, sampled):
    (abs_off, _), (abs_on, _) = _off_and_on(tiny_moe, sampled, 0.0)
    assert abs_off < 1e-4 and abs_on < 1e-4
