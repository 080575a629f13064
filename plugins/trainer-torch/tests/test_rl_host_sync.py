"""The RL step's micro-batches never make the host wait for the device: between the first
micro-batch's forward and the last one's backward prl reads no device value (``.item()``,
``int()``, ``float()``, a truth test, ``.tolist()``, ``nonzero``), and the whole step reads
a fixed number, however many micro-batches it has. A read per micro-batch would stop the
host from queueing micro-batch k + 1 until micro-batch k had finished on the GPU, leaving
the GPU idle in between; a read per token or per sample (sampling replay, a per-sample
custom loss, the token export) would do it many times per micro-batch.

Every part of the step that runs per micro-batch is on: sampling replay with the sampler's
mask logprobs (IPO's score centering reads them), ce and ref_kl tokens, two envs, a padding
micro-batch, per-token annotations and the token export."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("prl_weights_filesystem")
pytest.importorskip("prl_loss_ipo")

from prl_trainer_torch import annotations as notes  # noqa: E402
from prl_trainer_torch.rl import RLRun  # noqa: E402
from prl_trainer_torch.rl_step import run_micro_batches, to_micro_batch  # noqa: E402

from prl.config.components import TrainerConfig  # noqa: E402
from prl.contracts.loss import LossOutputs  # noqa: E402
from prl.orchestrator.packing import dummy_micro_batch, micro_batch  # noqa: E402
from prl.orchestrator.transport import write_batch  # noqa: E402
from prl.types import TrainingSample  # noqa: E402


def _load_host_reads():
    # pytest's importlib mode does not put this directory on sys.path
    spec = importlib.util.spec_from_file_location("host_reads", Path(__file__).with_name("host_reads.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


count_host_reads = _load_host_reads().count_host_reads

PROMPT = [256, 10, 20, 30, 40, 257]
LOSSES = {
    "ipo": {"type": "ipo", "eps": 0.5, "score_centering": True},
    "ppo": {"type": "ppo"},
    "cispo": {"type": "cispo"},
    "icepop": {"type": "icepop"},
    "custom": {"type": "custom", "import_path": f"{__file__}:sample_loss"},
}


def sample_loss(inputs, scale: float = 1.0) -> LossOutputs:
    """A custom loss (called once per packed sample) that reads nothing itself."""
    loss = -scale * inputs.advantages * inputs.trainer_logprobs * inputs.loss_mask
    return LossOutputs(loss=loss, metrics={"logp": inputs.trainer_logprobs.detach()})


def _sample(seed: int, env: str, rl=1.0, ce=0.0, ref_kl=0.0) -> TrainingSample:
    completion = [60 + (seed * 7 + i * 3) % 40 for i in range(5)]
    ids = PROMPT + completion
    mask = [False] * len(PROMPT) + [True] * len(completion)
    # the sampler kept the sampled token and two others (top-k 3) for each completion token
    kept = [[t, (t + 1) % 300, (t + 2) % 300] if m else [] for t, m in zip(ids, mask, strict=True)]
    return TrainingSample(
        input_ids=ids, loss_mask=mask, advantages=[(-1.0) ** seed if m else 0.0 for m in mask],
        inference_logprobs=[-math.log(320) if m else 0.0 for m in mask], temperature=0.7 + 0.1 * seed,
        rl_weights=[rl * m for m in mask], ce_weights=[ce * m for m in mask],
        ref_kl_weights=[ref_kl * m for m in mask], env_name=env, trace_id=f"{env}-{seed}",
        ref_logprobs=[-5.0] * len(ids) if ref_kl else None,
        sampling_mask=kept, sampling_mask_logprobs=[[-0.5, -1.5, -2.5] if k else [] for k in kept],
    )  # fmt: skip


def _micro_batches(n: int) -> list[dict]:
    """``n`` micro-batches of several samples each: rl tokens in two envs, ce tokens, ref_kl
    tokens, and every fourth one a padding micro-batch."""
    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append(dummy_micro_batch())
            continue
        samples = [_sample(3 * i, "alpha"), _sample(3 * i + 1, "beta", rl=0.0, ce=1.0)]
        samples.append(_sample(3 * i + 2, "beta", rl=0.5, ref_kl=1.0 if i % 2 else 0.0))
        out.append(micro_batch(samples))
    return out


@pytest.fixture(params=sorted(LOSSES))
def run(request, tmp_path, tiny_model, rl_config):
    if request.param == "custom":
        pytest.importorskip("prl_loss_custom")
    cfg = rl_config(tmp_path, tiny_model, enable_token_export=True)
    # rl_config merges a loss table into its ipo one; the loss is replaced whole instead
    cfg.loss = TrainerConfig.model_validate({"loss": LOSSES[request.param]}).loss
    r = RLRun(cfg)
    assert r.annotator is not None and r.exporter is not None  # both observe every micro-batch
    yield r
    r.close()


def _step(run, step: int, raws: list[dict]) -> tuple[list[str], list[str]]:
    """The host reads of one whole RL step on ``raws``, and of its micro-batches alone."""
    write_batch(run.run_dir, step, [raws])
    with count_host_reads() as whole:
        metrics = run.train_step(step)
    assert math.isfinite(metrics["loss/all"]) and metrics["optim/grad_norm"] > 0
    observer = notes.Fanout(run.exporter, run.annotator)
    mbs = [to_micro_batch(r, run.dist.device) for r in raws]
    run.exporter.begin(step)
    with count_host_reads() as per_micro_batch:
        run_micro_batches(run.policy, run.loss_fn, mbs, run.dist.world, observer)
    run.exporter.finish()
    run.policy.zero_grad(set_to_none=True)
    return whole, per_micro_batch


def test_the_micro_batches_of_a_step_are_trained_without_reading_a_device_value(run):
    one, one_mbs = _step(run, 1, _micro_batches(1))
    many, many_mbs = _step(run, 2, _micro_batches(8))
    assert one_mbs == [] and many_mbs == []
    # a fixed few per step (the grad norm, the metrics, the annotations), never per micro-batch
    assert len(one) == len(many) <= 4, many


def _odd(raw: dict) -> dict:
    """``raw`` with weights no float32 sum gets exactly, a first token in the loss and weighted
    (nothing predicts it: it must leave the masks and the denominators), weights on a prompt
    token (outside the loss mask: rl leaves it, ce and ref_kl count it) and a sampling mask
    on token 0 (which the roll hands to the last position)."""
    n = len(raw["input_ids"])
    raw["rl_weights"] = [w * (0.1 + i / 7) for i, w in enumerate(raw["rl_weights"])]
    raw["ce_weights"] = [w * 0.3 for w in raw["ce_weights"]]
    raw["loss_mask"][0], raw["rl_weights"][0], raw["ce_weights"][0], raw["ref_kl_weights"][0] = True, 2.0, 1.0, 1.0
    assert not raw["loss_mask"][2]
    raw["rl_weights"][2], raw["ce_weights"][2], raw["ref_kl_weights"][2] = 1.0, 0.5, 0.5
    raw["sampling_mask"] = [[7, 8], *raw["sampling_mask"][1:]]
    raw["sampling_mask_logprobs"] = [[-0.1, -3.0], *raw["sampling_mask_logprobs"][1:]]
    assert len(raw["sampling_mask"]) == n
    return raw


def test_what_the_host_finds_is_what_the_device_would_have_said():
    """Denominators, component flags, samples with rl tokens and replay positions, from the
    batch's lists, against the device functions they replace."""
    from prl_loss_common import components_present, local_scales, rl_mask

    raws = [*_micro_batches(4), _odd(_micro_batches(2)[1])]
    for mb in (to_micro_batch(r, torch.device("cpu")) for r in raws):
        weights = (mb.loss_mask, mb.rl_weights, mb.ce_weights, mb.ref_kl_weights)
        device = local_scales(*weights)
        for got, want in zip(vars(mb.host.scales).values(), vars(device).values(), strict=True):
            assert got == pytest.approx(want, rel=1e-6)
        assert mb.host.present == components_present(*weights)
        rl = rl_mask(mb.loss_mask, mb.rl_weights).split(mb.seq_lens)
        assert mb.host.rl_samples == [bool(part.any()) for part in rl]
        if mb.mask_valid is not None:
            rolled = torch.roll(mb.mask_valid, -1, 0).any(-1)
            assert mb.mask_rows.tolist() == rolled.nonzero().squeeze(-1).tolist()
    assert mb.mask_rows[-1] == len(mb.input_ids) - 1  # token 0's mask: the last position
    assert mb.host.rl_samples == [True, False, True]


def test_replay_over_the_hosts_positions_is_the_devices_own(tiny_model):
    from prl_trainer_torch.model import Dist, load_hf_model, parallelize
    from prl_trainer_torch.rl_step import forward_tokens

    hf = load_hf_model(str(tiny_model), torch.float32, "sdpa")  # a CPU run, also where CUDA is
    policy = parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=False, compile=False)
    mb = to_micro_batch(_odd(_micro_batches(1)[0]), torch.device("cpu"))
    with torch.no_grad():
        given = forward_tokens(policy, mb)
        mb.mask_rows = None  # looked up on the device instead
        looked_up = forward_tokens(policy, mb)
    for name in ("logp", "entropy", "mask_logp", "mask_mismatch"):
        assert torch.equal(getattr(given, name), getattr(looked_up, name)), name
    assert given.mask_mismatch.any()  # token 0's made-up mask is not the model's top set


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_no_micro_batch_synchronises(tmp_path, tiny_model, rl_config):
    cfg = rl_config(tmp_path, tiny_model, enable_token_export=True)
    cfg.loss = TrainerConfig.model_validate({"loss": LOSSES["ipo"]}).loss
    run = RLRun(cfg)
    try:
        raws = _micro_batches(8)
        write_batch(run.run_dir, 1, [raws])
        run.train_step(1)  # the first step compiles, which may wait
        mbs = [to_micro_batch(r, run.dist.device) for r in raws]
        run.exporter.begin(2)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            run_micro_batches(run.policy, run.loss_fn, mbs, run.dist.world, notes.Fanout(run.exporter, run.annotator))
        finally:
            torch.cuda.set_sync_debug_mode("default")
        run.exporter.finish()
    finally:
        run.close()
