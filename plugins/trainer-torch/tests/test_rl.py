"""The RL trainer step on the tiny model with hand-made batches: it learns (weights move in
the direction of the advantages), publishes every version through the filesystem weight
transport, writes its metrics, checkpoints, and resumes exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("prl_weights_filesystem")
pytest.importorskip("prl_loss_ipo")

from prl_trainer_torch.rl import RLRun  # noqa: E402

from prl.config.components import TrainerConfig  # noqa: E402
from prl.orchestrator.packing import pack  # noqa: E402
from prl.orchestrator.transport import write_batch  # noqa: E402
from prl.rl_launch import prepare_scratch  # noqa: E402
from prl.types import TrainingSample  # noqa: E402

PROMPT = [256, 10, 20, 30, 40, 257]
GOOD, BAD = [65, 66, 67, 258], [90, 91, 92, 258]


def _sample(completion: list[int], advantage: float, temperature: float, env: str) -> TrainingSample:
    ids = PROMPT + completion
    n, m = len(ids), len(completion)
    mask = [False] * len(PROMPT) + [True] * m
    return TrainingSample(
        input_ids=ids,
        loss_mask=mask,
        advantages=[advantage if x else 0.0 for x in mask],
        inference_logprobs=[-math.log(320) if x else 0.0 for x in mask],
        temperature=temperature,
        rl_weights=[1.0 if x else 0.0 for x in mask],
        ce_weights=[0.0] * n,
        ref_kl_weights=[0.0] * n,
        env_name=env,
        trace_id=f"{env}-{advantage}",
    )


def _write_batches(run_dir: Path, steps: range, ranks: int = 1) -> None:
    # Two envs and two temperatures; GOOD completions get +1, BAD ones -1.
    samples = [
        _sample(GOOD, 1.0, 1.0, "alpha"), _sample(BAD, -1.0, 1.0, "alpha"),
        _sample(GOOD, 1.0, 0.7, "beta"), _sample(BAD, -1.0, 0.7, "beta"),
    ]  # fmt: skip
    for step in steps:
        write_batch(run_dir, step, pack(samples, seq_len=24, ranks=ranks))


def _completion_logprob(weights: dict, model: Path, tokens: list[int]) -> float:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    hf.load_state_dict(weights, strict=False)
    ids = torch.tensor([PROMPT + tokens])
    with torch.no_grad():
        logp = hf(input_ids=ids).logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
    return float(logp[len(PROMPT) - 1 :].sum())


def _train(cfg: TrainerConfig, versions: list[int], consumer_cls: type) -> tuple[RLRun, object]:
    run = RLRun(cfg)
    consumer = consumer_cls(run.run_dir, versions)
    consumer.start()
    try:
        run.train()
    finally:
        run.close()
    consumer.join(30)
    assert consumer.error is None, consumer.error
    return run, consumer


def test_rl_steps_learn_publish_and_log(tmp_path, tiny_model, rl_config, weight_consumer):
    cfg = rl_config(tmp_path, tiny_model, ckpt={"interval": 1})
    run_dir = tmp_path / "outputs" / "rl"
    _write_batches(run_dir, range(1, 3))
    run, consumer = _train(cfg, [0, 1, 2], weight_consumer)

    assert sorted(consumer.weights) == [0, 1, 2]
    w0, w2 = consumer.weights[0], consumer.weights[2]
    assert any(not torch.equal(w0[k], w2[k]) for k in w0)
    # The advantages push GOOD up and BAD down.
    good = _completion_logprob(w2, tiny_model, GOOD) - _completion_logprob(w0, tiny_model, GOOD)
    bad = _completion_logprob(w2, tiny_model, BAD) - _completion_logprob(w0, tiny_model, BAD)
    assert good > 0 > bad

    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in rows if r.get("producer") == "trainer" and "loss/all" in r}
    assert sorted(steps) == [1, 2]
    row = steps[1]
    for key in (
        "loss/all", "loss/rl", "entropy/all/mean", "entropy/alpha/mean", "entropy/beta/mean",
        "mismatch_kl/all/mean", "mismatch_kl/beta/mean", "is_masked/mean", "optim/lr", "optim/grad_norm",
        "perf/throughput", "time/step", "time/wait_for_batch", "time/forward_backward", "time/broadcast_weights",
    ):  # fmt: skip
        assert key in row and math.isfinite(row[key]), key
    assert row["entropy/all/mean"] > 0 and row["optim/grad_norm"] > 0
    assert any("time/save_ckpt" in r for r in rows if r.get("producer") == "trainer")
    assert (run_dir / "checkpoints" / "step_2" / "trainer" / ".metadata").exists()
    assert run.progress["step"] == 2 and run.progress["total_samples"] == 8
    # trainer.annotations (on by default): each step annotated the trained branch token for token
    from prl_monitor_file import read_annotations

    notes = read_annotations(run_dir / "monitors" / "file", "trainer", "beta--1.0")
    assert [r["info"]["step"] for r in notes] == [1, 2]
    assert all(len(r["branches"][0]["entropies"]) == len(PROMPT + BAD) for r in notes)


def test_resume_republishes_and_continues_exactly(tmp_path, tiny_model, rl_config, weight_consumer):
    run_dir = tmp_path / "outputs" / "rl"
    _write_batches(run_dir, range(1, 3))
    _, straight = _train(rl_config(tmp_path, tiny_model, ckpt={"interval": 1}), [0, 1, 2], weight_consumer)

    # A fresh attempt resuming from step 1 re-publishes version 1 and retrains step 2; the
    # launcher clears the broadcasts from the resume step on first (prl.rl_launch).
    prepare_scratch(run_dir, 1)
    _write_batches(run_dir, range(2, 3))
    _, resumed = _train(
        rl_config(tmp_path, tiny_model, ckpt={"interval": 1}, resume={"step": 1}), [1, 2], weight_consumer
    )
    for key, value in straight.weights[1].items():
        assert torch.equal(resumed.weights[1][key], value), key
    for key, value in straight.weights[2].items():
        torch.testing.assert_close(resumed.weights[2][key], value, rtol=0, atol=1e-6)


def test_plain_resume_needs_the_orchestrator_part(tmp_path, tiny_model, rl_config, weight_consumer):
    run_dir = tmp_path / "outputs" / "rl"
    _write_batches(run_dir, range(1, 2))
    _train(rl_config(tmp_path, tiny_model, ckpt={}, max_steps=1), [0, 1], weight_consumer)
    with pytest.raises(FileNotFoundError, match="orchestrator"):
        RLRun(rl_config(tmp_path, tiny_model, resume={}))


@pytest.mark.slow
def test_two_workers_under_torchrun_match_one(tmp_path, tiny_model, rl_config, weight_consumer):
    from prl_trainer_torch.trainer import TorchTrainer

    published = {}
    for name, workers in (("one", 1), ("two", 2)):
        cfg = rl_config(tmp_path, tiny_model, run={"name": name}, num_workers=workers, max_steps=1)
        run_dir = tmp_path / "outputs" / name
        # The same four samples, packed for one rank or spread over two.
        _write_batches(run_dir, range(1, 2), ranks=workers)
        consumer = weight_consumer(run_dir, [0, 1])
        consumer.start()
        assert TorchTrainer.run_rl(cfg) == 0
        consumer.join(30)
        assert consumer.error is None, consumer.error
        published[name] = consumer.weights[1]
    for key, value in published["one"].items():
        torch.testing.assert_close(published["two"][key], value, atol=2e-5, rtol=1e-4, msg=key)
    # trainer.annotations: rank 1's records are gathered into rank 0's file monitor
    from prl_monitor_file import read_annotations

    notes = {name: read_annotations(tmp_path / "outputs" / name / "monitors" / "file", "trainer") for name in published}
    assert {r["info"]["rank"] for r in notes["two"]} == {0, 1}
    logps = {name: {r["trace_id"]: r["branches"][0]["trainer_logprobs"] for r in recs} for name, recs in notes.items()}
    assert len(logps["one"]) == 4 and logps["one"].keys() == logps["two"].keys()
    for trace_id, values in logps["one"].items():
        assert values[0] is None and logps["two"][trace_id][0] is None
        assert values[1:] == pytest.approx(logps["two"][trace_id][1:], abs=2e-4), trace_id
