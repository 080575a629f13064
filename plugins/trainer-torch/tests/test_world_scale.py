"""Data parallelism does not change the RL gradient: one worker and two workers (torchrun,
gloo on CPU) log the same loss and the same grad norm for the same global batch.

FSDP averages gradients over ranks, so each rank's backward must be scaled by the world
size for the sum over ranks to be the gradient of the one global loss. The weight-parity
test in ``test_rl.py`` cannot see a missing scale: clipping to ``max_norm`` 1 and AdamW's
per-coordinate normalisation both make the update (almost) invariant to a global factor on
the gradient. A user would see it in ``optim/grad_norm`` (halved on two GPUs), in the
effective clipping threshold and in SGD-like optimisers, so this test compares the logged
metrics with clipping out of the way.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("prl_weights_filesystem")
pytest.importorskip("prl_loss_ipo")

from prl_trainer_torch.trainer import TorchTrainer  # noqa: E402

from prl.orchestrator.packing import pack  # noqa: E402
from prl.orchestrator.transport import write_batch  # noqa: E402
from prl.types import TrainingSample  # noqa: E402

PROMPT = [256, 10, 20, 30, 40, 257]
# Completions of different lengths: with seq_len 24 they pack into two micro-batches of 24
# and 17 tokens, so the two ranks hold unequal token counts and only the global
# normalisation (not a per-rank mean) gives the one-worker loss.
COMPLETIONS = ([65, 66, 258], [90, 91, 92, 93, 258], [70, 71, 72, 73, 74, 75, 258], [80, 258])
ADVANTAGES = (1.0, -1.0, 0.5, -0.5)


def _sample(completion: list[int], advantage: float, index: int) -> TrainingSample:
    ids = PROMPT + completion
    n = len(ids)
    mask = [False] * len(PROMPT) + [True] * len(completion)
    return TrainingSample(
        input_ids=ids,
        loss_mask=mask,
        advantages=[advantage if x else 0.0 for x in mask],
        inference_logprobs=[-math.log(320) if x else 0.0 for x in mask],
        temperature=1.0,
        rl_weights=[1.0 if x else 0.0 for x in mask],
        # a CE term on one sample too, so every normalised component goes through the scale
        ce_weights=[1.0 if x and index == 0 else 0.0 for x in mask],
        ref_kl_weights=[0.0] * n,
        env_name="alpha",
        trace_id=f"s{index}",
    )


def _step_metrics(tmp_path: Path, model: Path, workers: int, rl_config, weight_consumer) -> dict:
    name = f"w{workers}"
    # max_norm far above the gradient norm: clipping must not rescale anything
    cfg = rl_config(tmp_path, model, run={"name": name}, optim={"max_norm": 1e6}, max_steps=1, num_workers=workers)
    run_dir = tmp_path / "outputs" / name
    samples = [_sample(c, a, i) for i, (c, a) in enumerate(zip(COMPLETIONS, ADVANTAGES, strict=True))]
    batch = pack(samples, seq_len=24, ranks=workers)
    per_rank = [sum(len(mb["input_ids"]) for mb in rank) for rank in batch]
    assert per_rank == ([41] if workers == 1 else [24, 17])
    write_batch(run_dir, 1, batch)
    consumer = weight_consumer(run_dir, [0, 1])
    consumer.start()
    assert TorchTrainer.run_rl(cfg) == 0
    consumer.join(30)
    assert consumer.error is None, consumer.error
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if r.get("producer") == "trainer" and "loss/all" in r]
    return row


@pytest.mark.slow
def test_two_workers_log_the_same_loss_and_grad_norm_as_one(tmp_path, tiny_model, rl_config, weight_consumer):
    one = _step_metrics(tmp_path, tiny_model, 1, rl_config, weight_consumer)
    two = _step_metrics(tmp_path, tiny_model, 2, rl_config, weight_consumer)
    assert one["optim/grad_norm"] > 0 and one["loss/ce"] > 0
    for key in ("loss/all", "loss/rl", "loss/ce"):
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    # The grad norm is the direct witness of the gradient's scale (a missing world factor halves it).
    assert two["optim/grad_norm"] == pytest.approx(one["optim/grad_norm"], rel=1e-4), (
        f"grad norm with 2 workers {two['optim/grad_norm']:.6g} vs 1 worker {one['optim/grad_norm']:.6g}"
    )
