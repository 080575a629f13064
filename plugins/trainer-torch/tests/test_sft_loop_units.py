"""The SFT step's arithmetic on the tiny model, checked by hand: the loss of a step with a
single loss token, the gradient two ranks produce against the one-rank gradient, the count
of rows whose loss is not finite, the progress counters over steps, every logged metric
(MFU, the perplexity cap, subset ratios) and validation sent in several copies."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from prl_trainer_torch import sft
from prl_trainer_torch.device_rows import rows_to_device
from prl_trainer_torch.loader import StepBatch
from prl_trainer_torch.sft import SFTRun


def nll_by_hand(model, rows) -> tuple[torch.Tensor, int]:
    """Summed NLL of the loss tokens of ``rows`` (PackedRow) from the plain transformers forward."""
    nll, count = torch.zeros(()), 0
    for row in rows_to_device(rows, torch.device("cpu")):
        logits = model(input_ids=row.input_ids, position_ids=row.position_ids).logits.float()
        logp = logits.log_softmax(-1).gather(-1, row.targets[..., None])[..., 0]
        nll = nll - (logp * row.loss_mask).sum()
        count += row.loss_tokens
    return nll, count


def one_loss_token(row):
    """``row`` training only its first loss token."""
    mask = torch.zeros_like(row.loss_mask)
    mask[int(row.loss_mask.nonzero()[0])] = True
    return dataclasses.replace(row, loss_mask=mask)


def feed(run, *batches: StepBatch) -> None:
    """The run's loader hands out ``batches`` in order."""
    it = iter(batches)
    run.loader.next_step = lambda: next(it)


@pytest.fixture
def make_run(tmp_path, tiny_model, reverse_data, sft_config):
    train, val = reverse_data
    made = []

    def make(**overrides):
        val_cfg = {"interval": 3, "data": {"name": str(val), "seq_len": 64, "batch_size": 4, "shuffle": False}}
        overrides = {"val": val_cfg, "data": {"num_workers": 0}, "scheduler": {"type": "constant"}, **overrides}
        made.append(SFTRun(sft_config(tmp_path, tiny_model, train, **overrides)))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture
def run(make_run):
    return make_run()


def test_a_step_with_one_loss_token_trains_exactly_that_tokens_nll(run):
    row = one_loss_token(run.loader.next_step().rows[0])
    feed(run, StepBatch([row], loss_tokens=1, tokens=row.num_tokens, samples=row.num_samples))
    before = copy.deepcopy(run.hf)
    nll, count = nll_by_hand(before, [row])
    assert count == 1
    metrics = run.train_step()
    assert metrics["loss/mean"] == pytest.approx(float(nll.detach()), rel=1e-4)
    nll.backward()  # the step's gradient is that of the token's NLL itself, not of a fraction of it
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in before.parameters() if p.grad is not None))
    assert metrics["optim/grad_norm"] == pytest.approx(float(norm), rel=1e-3)


def test_documents_packed_in_a_row_train_as_if_each_were_alone(make_run):
    run = make_run(data={"num_workers": 0, "seq_len": 256, "batch_size": 2})
    batch = run.loader.next_step()
    assert max(len(r.lengths) for r in batch.rows) > 1
    nll = 0.0
    with torch.no_grad():
        for r in batch.rows:
            start = 0
            for n in r.lengths:  # each document through the model on its own
                doc = slice(start, start + n)
                logp = run.hf(input_ids=r.input_ids[None, doc]).logits.float()[0].log_softmax(-1)
                nll -= float((logp.gather(-1, r.targets[doc, None])[:, 0] * r.loss_mask[doc]).sum())
                start += n
    feed(run, batch)
    assert run.train_step()["loss/mean"] == pytest.approx(nll / batch.loss_tokens, rel=1e-4)


def test_two_ranks_gradients_average_to_the_one_rank_gradient(run, monkeypatch):
    """FSDP averages the ranks' gradients, so each rank's rows must carry world / N_global:
    the average of the two ranks' gradients is then the gradient of the global mean NLL."""
    batch = run.loader.next_step()
    grads = []

    def capture(optimizer, policy, max_norm):  # the gradient before the optimizer uses it
        grads.append([p.grad.clone() for p in policy.parameters()])
        optimizer.zero_grad(set_to_none=True)
        return 0.0

    monkeypatch.setattr(sft, "optimizer_step", capture)
    monkeypatch.setattr(sft, "all_sum", lambda values, dist: values)  # no process group here
    one_rank = run.dist
    half = len(batch.rows) // 2
    for world, rank, rows in ((1, 0, batch.rows), (2, 0, batch.rows[:half]), (2, 1, batch.rows[half:])):
        feed(run, dataclasses.replace(batch, rows=rows))
        run.dist = dataclasses.replace(one_rank, world=world, rank=rank)
        run.train_step()
    whole, rank0, rank1 = grads
    for g, a, b in zip(whole, rank0, rank1, strict=True):
        torch.testing.assert_close((a + b) / 2, g, rtol=1e-4, atol=1e-7)


def test_each_row_whose_loss_is_not_finite_is_counted(run):
    rows = run.loader.next_step().rows
    # A token that only the first row holds: its embedding output turns NaN, so only that
    # row's loss does (the embedding is tied to the output layer, so the table stays clean).
    ids = [set(r.input_ids[: r.num_tokens].tolist()) for r in rows]
    first = next(i for i in range(len(rows)) if ids[i] - set().union(*(ids[:i] + ids[i + 1 :])))
    rows = [rows[first]] + rows[:first] + rows[first + 1 :]
    tok = min(ids[first] - set().union(*(ids[:first] + ids[first + 1 :])))

    def poison(module, args, out):
        return out.masked_fill((args[0] == tok)[..., None], float("nan"))

    run.hf.get_input_embeddings().register_forward_hook(poison)
    feed(run, StepBatch(rows, sum(int(r.loss_mask.sum()) for r in rows), 1, 1))
    metrics = run.train_step()
    assert metrics["loss/nan_count"] == 1
    assert math.isnan(metrics["loss/mean"])


def test_progress_counts_every_steps_tokens_and_samples(run):
    first, second = run.loader.next_step(), run.loader.next_step()
    feed(run, first, second)
    run.train_step()
    metrics = run.train_step()
    tokens, samples = first.tokens + second.tokens, first.samples + second.samples
    assert run.progress == {"step": 2, "total_tokens": tokens, "total_samples": samples}
    assert metrics["progress/num_tokens"] == tokens and metrics["progress/num_samples"] == samples


def test_a_step_logs_every_metric_with_mfu_against_the_peak_flops(make_run, monkeypatch):
    monkeypatch.setenv("PRL_PEAK_FLOPS", "1e12")
    run = make_run()
    batch = run.loader.next_step()
    feed(run, batch)
    metrics = run.train_step()
    assert set(metrics) == {
        *("loss/mean", "loss/perplexity", "loss/nan_count", "optim/lr", "optim/grad_norm"),
        *("perf/throughput", "perf/peak_memory", "perf/mfu", "time/step", "time/forward_backward"),
        *("time/optimizer", "progress/epoch", "progress/num_samples", "progress/num_tokens"),
    }
    assert metrics["progress/epoch"] == 0.0 and metrics["perf/peak_memory"] > 0
    assert metrics["perf/mfu"] == pytest.approx(flops_by_hand(run, batch) / metrics["time/step"] / 1e12, rel=1e-9)


def test_mfu_of_two_ranks_is_their_flops_over_their_peak(make_run, monkeypatch):
    monkeypatch.setenv("PRL_PEAK_FLOPS", "1e12")
    run = make_run()
    batch = run.loader.next_step()
    run.dist = dataclasses.replace(run.dist, world=2)
    monkeypatch.setattr(sft, "all_sum", lambda values, dist: [2 * v for v in values])  # a twin rank
    m = run._step_metrics(batch, 1.0, 1.0, 1e-3, 0.0, (0.0, 1.0, 2.0))
    assert m["perf/mfu"] == pytest.approx(2 * flops_by_hand(run, batch) / 2.0 / (2 * 1e12), rel=1e-9)


def flops_by_hand(run, batch) -> float:
    """6 FLOPs per parameter and token (the tied embedding table's matmul is the output
    layer's) plus attention's 6 * layers * hidden per pair of tokens of a document."""
    hf = run.hf.config
    params = sum(p.numel() for p in run.hf.parameters())
    docs = [n for r in batch.rows for n in r.lengths]
    return 6 * params * sum(docs) + 6 * hf.num_hidden_layers * hf.hidden_size * sum(n * n for n in docs)


def test_the_steps_nll_sum_is_kept_in_double_precision(run, monkeypatch):
    """The rows' NLLs add up on the device in float64, as exact as the Python float the log
    reads: in float32, 2**24 + 1 rounds back to 2**24."""
    weight = next(run.policy.parameters())
    nlls = iter([2.0**24, 1.0])
    monkeypatch.setattr(run, "_forward_nll", lambda row: next(nlls) + 0 * weight.sum())
    nll_sum, nans = run.accumulate([None, None], scale=1.0)
    assert float(nll_sum) == 2.0**24 + 1 and float(nans) == 0


def test_later_epochs_are_logged_as_such(run):
    run.loader.epoch = 3
    assert run.train_step()["progress/epoch"] == 3.0


def test_step_metrics_from_the_step_figures(run):
    batch = StepBatch([], loss_tokens=10, tokens=500, samples=3)
    m = run._step_metrics(batch, 30.0, 2.5, 1e-3, 2.0, (10.0, 11.5, 12.0))
    assert m["loss/mean"] == 30.0 and m["loss/nan_count"] == 2.0
    assert m["loss/perplexity"] == pytest.approx(math.exp(20.0))  # capped: a diverged loss stays finite
    assert m["optim/grad_norm"] == 2.5 and m["optim/lr"] == 1e-3
    assert m["time/step"] == 2.0 and m["time/forward_backward"] == 1.5 and m["time/optimizer"] == 0.5
    assert m["perf/throughput"] == 250.0


def test_subset_ratios_are_shares_of_everything_trained_so_far(run):
    run.labels = ["easy", "hard"]
    run.loader.seen_samples, run.loader.seen_tokens = {0: 1}, {0: 1, 1: 3}
    assert run._mixture_metrics() == {
        "progress/easy/ratio_samples": 1.0,
        "progress/hard/ratio_samples": 0.0,  # not trained yet
        "progress/easy/ratio_tokens": 0.25,
        "progress/hard/ratio_tokens": 0.75,
    }
    run.loader.seen_samples, run.loader.seen_tokens = {}, {}
    assert set(run._mixture_metrics().values()) == {0.0}


def test_validation_sent_in_several_copies_covers_every_row(run, monkeypatch):
    monkeypatch.setattr(sft, "VAL_ROWS_PER_COPY", 3)
    assert len(run.val) % 3 != 0  # a last, partial copy
    with torch.no_grad():
        nll, count = nll_by_hand(run.hf, run.val)
    got = run.validate()
    assert got["val/loss"] == pytest.approx(float(nll) / count, rel=1e-4)


def test_validation_of_a_single_loss_token_is_its_nll(run):
    run.val = [one_loss_token(run.val[0])]
    with torch.no_grad():
        nll, count = nll_by_hand(run.hf, run.val)
    assert count == 1
    assert run.validate()["val/loss"] == pytest.approx(float(nll), rel=1e-4)


def test_validation_perplexity_is_capped_for_a_diverged_model(run):
    with torch.no_grad():
        run.hf.get_output_embeddings().weight.mul_(1000.0)
    got = run.validate()
    assert got["val/loss"] > 20.0
    assert got["val/perplexity"] == pytest.approx(math.exp(20.0))


def test_validation_sums_in_double_precision(run, monkeypatch):
    run.val = run.val[:2]
    count = sum(int(r.loss_mask.sum()) for r in run.val)
    nlls = iter([2.0**24, 1.0])  # in float32, 2**24 + 1 rounds back to 2**24
    monkeypatch.setattr(run, "_forward_nll", lambda row: torch.tensor(next(nlls)))
    assert run.validate()["val/loss"] == (2.0**24 + 1) / count
