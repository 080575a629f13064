"""``trainer.enable_token_export``: per-token records of a real RL micro-batch step."""

from __future__ import annotations

import json
import math

import torch
from prl_trainer_torch.logprobs import chunked_logprobs
from prl_trainer_torch.rl_step import run_micro_batches, to_micro_batch, token_logprobs
from prl_trainer_torch.token_export import STABLE, TokenExporter

from prl.config.components import TrainerConfig
from prl.orchestrator.packing import dummy_micro_batch, micro_batch
from prl.types import TrainingSample

CPU = torch.device("cpu")


class TinyPolicy(torch.nn.Module):
    """An embedding scored by an output matrix through the trainer's real log-prob kernel."""

    def __init__(self, vocab: int = 12, dim: int = 6) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.head = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))

    def forward(self, input_ids, position_ids, targets, temps, entropy=False, bounds=None):
        h = self.emb[input_ids] * (1 + 0.1 * position_ids[..., None].float())
        return chunked_logprobs(h, self.head, targets, temps, chunk_size=4, entropy=entropy)


def _sample(ids, env, adv, lp=None) -> TrainingSample:
    n = len(ids)
    lp = list(lp) if lp is not None else [-1.0] * n
    return TrainingSample(list(ids), [True] * n, [adv] * n, lp, 1.0, [1.0] * n, [0.0] * n, [0.0] * n, env_name=env)


def _ipo():
    return TrainerConfig.model_validate({"loss": {"type": "ipo"}}).loss.build()


FIELDS = {
    "schema_version", "step", "rank", "micro_step", "micro_sequence_idx", "export_sequence_idx", "env_name",
    "trace_id", "branch_index", "token_ids", "position_ids", "loss_mask", "advantages", "inference_logprobs",
    "trainer_logprobs", "entropy", "mismatch_kl", "log_importance_ratio", "importance_ratio", "prob_delta",
    "is_masked", "is_masked_high", "is_masked_low", "rl_weights", "ce_weights", "ref_kl_weights",
}  # fmt: skip


def _samples():
    a = _sample([1, 2, 3, 4], env="a", adv=0.5, lp=[0.0, -0.1, -5.0, -2.0])
    a.trace_id, a.branch_index = "trace-a", 0
    b = _sample([5, 6, 7], env="b", adv=-1.0)
    b.trace_id, b.branch_index = "trace-b", 1
    return a, b


def test_every_sequence_is_exported_with_the_trainer_view_and_stable_marks_the_step(tmp_path):
    policy = TinyPolicy()
    loss_config = TrainerConfig.model_validate({"loss": {"type": "ipo", "eps": 0.3}}).loss
    raws = [micro_batch(list(_samples())), micro_batch([_samples()[0]])]
    mbs = [to_micro_batch(r, CPU) for r in raws]
    exporter = TokenExporter(tmp_path, rank=0, world=1, loss_config=loss_config)
    exporter.begin(3)
    run_micro_batches(policy, _ipo(), mbs, world=1, export=exporter)
    assert not (tmp_path / "token_exports/step_3/rank_0.jsonl").exists()  # not before the step is done
    exporter.finish()
    step_dir = tmp_path / "token_exports" / "step_3"
    assert json.loads((step_dir / STABLE).read_text()) == {"step": 3, "ranks": 1}
    rows = [json.loads(line) for line in (step_dir / "rank_0.jsonl").read_text().splitlines()]
    where = [(r["trace_id"], r["branch_index"], r["env_name"], r["micro_step"], r["micro_sequence_idx"]) for r in rows]
    assert where == [("trace-a", 0, "a", 0, 0), ("trace-b", 1, "b", 0, 1), ("trace-a", 0, "a", 1, 0)]
    assert [r["export_sequence_idx"] for r in rows] == [0, 1, 2]
    first = rows[0]
    assert set(first) == FIELDS and first["schema_version"] == 1 and first["step"] == 3
    assert first["token_ids"] == [1, 2, 3, 4] and first["position_ids"] == [0, 1, 2, 3]
    assert first["loss_mask"] == [False, True, True, True]  # a document's first token has no prediction
    # the exported trainer logprobs are the policy's own, token for token
    logp, ent = token_logprobs(policy, to_micro_batch(micro_batch([_samples()[0]]), CPU))
    assert first["trainer_logprobs"] == [round(v, 6) for v in logp.tolist()]
    assert first["entropy"] == [round(v, 6) for v in ent.tolist()]
    for i in range(1, 4):
        lr = first["trainer_logprobs"][i] - first["inference_logprobs"][i]
        assert math.isclose(first["log_importance_ratio"][i], lr, abs_tol=1e-5)
        assert math.isclose(first["mismatch_kl"][i], math.exp(lr) - 1 - lr, rel_tol=1e-4, abs_tol=1e-5)
        delta = math.exp(first["trainer_logprobs"][i]) - math.exp(first["inference_logprobs"][i])
        assert first["is_masked_high"][i] == (delta > 0.3) and first["is_masked_low"][i] == (delta < -0.3)
    # token 1 was sampled with p = e^-0.1 ≈ 0.9: the tiny policy gives it far less, so IPO drops it
    assert first["is_masked_low"][1] and first["is_masked"][1]
    assert first["is_masked"][0] is False  # no prediction, never an rl token


def test_padding_is_not_exported_and_a_rank_set_is_stable_only_when_complete(tmp_path):
    policy = TinyPolicy()
    loss_config = TrainerConfig.model_validate({"loss": {"type": "ipo"}}).loss
    pad = to_micro_batch(dummy_micro_batch(), CPU)
    ranks = [TokenExporter(tmp_path, rank=r, world=2, loss_config=loss_config) for r in (0, 1)]
    for r in ranks:
        r.begin(1)
    for r, mb in zip(ranks, (pad, to_micro_batch(micro_batch([_samples()[1]]), CPU)), strict=True):
        with torch.no_grad():
            logp, ent = token_logprobs(policy, mb)
        r.add(0, mb, logp, ent)
    ranks[0].finish()
    step_dir = tmp_path / "token_exports" / "step_1"
    assert (step_dir / "rank_0.jsonl").read_text() == "" and not (step_dir / STABLE).exists()
    ranks[1].finish()
    assert (step_dir / STABLE).exists()
    assert json.loads((step_dir / "rank_1.jsonl").read_text())["trace_id"] == "trace-b"
