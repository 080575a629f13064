"""One SFT step checked by hand on the tiny model: the loss is the mean NLL over the step's
loss tokens, the gradient is that mean's, the lr logged is the one the step used; then
validation, the checkpoint resume options and the command-line entry."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import torch
from prl_trainer_torch import common, sft
from prl_trainer_torch.config import SchedulerConfig
from prl_trainer_torch.optim import lr_factor
from prl_trainer_torch.sft import SFTRun


def by_hand(model, rows) -> tuple[torch.Tensor, int]:
    """Summed NLL of the loss tokens of ``rows`` from the plain transformers forward."""
    nll, count = torch.zeros(()), 0
    for row in rows:
        logits = model(input_ids=row.input_ids[None], position_ids=row.position_ids[None]).logits.float()
        logp = logits.log_softmax(-1).gather(-1, row.targets[None, :, None])[..., 0]
        nll = nll - (logp * row.loss_mask[None]).sum()
        count += int(row.loss_mask.sum())
    return nll, count


@pytest.fixture
def run(tmp_path, tiny_model, reverse_data, sft_config):
    train, val = reverse_data
    sched = {"type": "linear", "warmup_steps": 2, "decay_steps": 0}
    val_cfg = {"interval": 3, "data": {"name": str(val), "seq_len": 64, "batch_size": 4, "shuffle": False}}
    r = SFTRun(sft_config(tmp_path, tiny_model, train, scheduler=sched, val=val_cfg, data={"num_workers": 0}))
    yield r
    r.close()


def test_a_step_trains_the_mean_nll_of_its_loss_tokens(run):
    before = copy.deepcopy(run.hf)
    taken = []
    next_step = run.loader.next_step
    run.loader.next_step = lambda: taken.append(next_step()) or taken[-1]
    metrics = run.train_step()
    (batch,) = taken
    nll, count = by_hand(before, batch.rows)
    assert count == batch.loss_tokens > 0
    loss = nll / count
    assert metrics["loss/mean"] == pytest.approx(loss.item(), rel=1e-4)
    assert metrics["loss/perplexity"] == pytest.approx(math.exp(loss.item()), rel=1e-4)
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in before.parameters() if p.grad is not None))
    assert metrics["optim/grad_norm"] == pytest.approx(float(norm), rel=1e-3)
    assert metrics["optim/lr"] == pytest.approx(3e-3 * 0.5)  # step 0 of a 2-step warmup
    assert run.optimizer.param_groups[0]["lr"] == pytest.approx(3e-3)  # the scheduler stepped
    assert metrics["loss/nan_count"] == 0
    assert run.progress == {"step": 1, "total_tokens": batch.tokens, "total_samples": batch.samples}
    assert metrics["progress/num_tokens"] == batch.tokens and metrics["progress/num_samples"] == batch.samples
    assert metrics["perf/throughput"] == pytest.approx(batch.tokens / metrics["time/step"])
    assert metrics["time/step"] == pytest.approx(metrics["time/forward_backward"] + metrics["time/optimizer"])
    assert all(p.grad is None for p in run.hf.parameters())  # cleared for the next step
    moved = [not torch.equal(a, b) for a, b in zip(before.parameters(), run.hf.parameters(), strict=True)]
    assert all(moved)


def test_validation_is_the_mean_nll_over_every_validation_token(run):
    with torch.no_grad():
        nll, count = by_hand(run.hf, run.val)
    got = run.validate()
    assert got["val/loss"] == pytest.approx(float(nll) / count, rel=1e-4)
    assert got["val/perplexity"] == pytest.approx(math.exp(float(nll) / count), rel=1e-4)


def test_validation_runs_at_its_interval_and_at_the_last_step(run):
    assert run.total == 4
    assert [s for s in range(1, 5) if run._should_validate(s)] == [3, 4]


SCHED = {"type": "linear", "warmup_steps": 0, "decay_steps": 3, "min_lr_ratio": 0.0}


def _resumed(tmp_path, tiny_model, train, sft_config, **resume):
    """A run of 4 steps that saved step 2, resumed from step 2 with ``resume``."""
    common = {"scheduler": SCHED, "data": {"num_workers": 0}, "max_steps": 4}
    first = SFTRun(sft_config(tmp_path, tiny_model, train, ckpt={"interval": 2}, **common))
    try:
        first.train()
    finally:
        first.close()
    return SFTRun(sft_config(tmp_path, tiny_model, train, resume={"step": 2, **resume}, **common))


def test_a_resume_restores_the_step_the_schedule_and_the_data_cursor(tmp_path, tiny_model, reverse_data, sft_config):
    run = _resumed(tmp_path, tiny_model, reverse_data[0], sft_config)
    try:
        assert run.progress["step"] == 2 and run.loader.rows == 2 * run.loader.rows_per_step
        # Linear decay over the last 3 of 4 steps: step 2 (0-based) is the second decayed one.
        assert run.optimizer.param_groups[0]["lr"] == pytest.approx(3e-3 * lr_factor(2, 4, SchedulerConfig(**SCHED)))
        assert run.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    finally:
        run.close()


def test_skipping_the_scheduler_rebuilds_it_over_the_remaining_steps(tmp_path, tiny_model, reverse_data, sft_config):
    run = _resumed(tmp_path, tiny_model, reverse_data[0], sft_config, skip_scheduler=True, skip_dataloader=True)
    try:
        assert run.progress["step"] == 2 and run.loader.rows == 0
        # A fresh schedule over the 2 remaining steps, both in its decay: 1 - 1/2.
        assert run.optimizer.param_groups[0]["lr"] == pytest.approx(3e-3 * 0.5)
    finally:
        run.close()


def test_rank_sums_add_every_ranks_values(monkeypatch):
    def all_reduce(t):  # a second rank that contributed (10, 20)
        assert t.dtype == torch.float64
        t += torch.tensor([10.0, 20.0], dtype=torch.float64)

    monkeypatch.setattr(common.tdist, "all_reduce", all_reduce)
    assert common.all_sum([1.5, 2.0], NS(world=2, device=torch.device("cpu"))) == [11.5, 22.0]
    assert common.all_sum([1.5, 2.0], NS(world=1, device=torch.device("cpu"))) == [1.5, 2.0]


def test_the_run_directory_is_run_dir_else_run_name():
    assert common.run_dir_of(NS(output_dir="out", run=NS(dir=None, name="a"))) == Path("out/a")
    assert common.run_dir_of(NS(output_dir="out", run=NS(dir="d", name="a"))) == Path("out/d")
    with pytest.raises(ValueError, match="run.name: the run has no name"):
        common.run_dir_of(NS(output_dir="out", run=NS(dir=None, name=None)))


def test_the_rank_entry_point_names_its_usage(capsys):
    assert sft.main([]) == 2
    assert "usage: python -m prl_trainer_torch.sft <resolved sft.json>" in capsys.readouterr().err


def test_the_rank_entry_point_runs_a_resolved_config(tmp_path, tiny_model, reverse_data, sft_config):
    cfg = sft_config(tmp_path, tiny_model, reverse_data[0], max_steps=1, ckpt={}, data={"num_workers": 0})
    path = tmp_path / "sft.json"
    path.write_text(cfg.model_dump_json())
    assert sft.main([str(path)]) == 0
    assert (tmp_path / "outputs" / "t" / "checkpoints" / "step_1" / "trainer" / "COMPLETE").exists()


def test_each_rank_validates_its_share_of_the_rows(run, monkeypatch):
    everything = [r.input_ids.tolist() for r in run.val]
    monkeypatch.setattr(run, "dist", NS(rank=1, world=2, device=torch.device("cpu")))
    share = run._val_rows(str(run.config.model.name), run.hf.config.vocab_size)
    assert [r.input_ids.tolist() for r in share] == everything[1::2]


@pytest.mark.parametrize("main", [True, False])
def test_online_eval_publishes_the_start_weights_and_plans_the_later_versions(tmp_path, monkeypatch, main):

    published = []
    monkeypatch.setattr(sft, "publish_weights", lambda *args: published.append(args))
    run = SFTRun.__new__(SFTRun)  # only what start_broadcasts reads
    run.progress, run.total, run.run_dir = {"step": 2}, 10, tmp_path
    run.config, run.dist = NS(eval=NS(interval=3)), NS(is_main=main)
    run.hf, run.transport = "model", "transport"
    run.start_broadcasts()
    assert run.broadcast_at == {3, 6, 9, 10}  # every 3rd step after the start, and the last
    assert published == [("model", "transport", run.dist, 2)]
    plan = tmp_path / "broadcasts"
    assert plan.exists() == main  # rank 0 writes the plan the orchestrator reads
