"""The SFT run around its steps, in process on the tiny model: what it logs and when
(validation before the first step, garbage-collection and broadcast times, the log line and
the progress bar), what a checkpoint records and which checkpoints survive a resume, how
many steps a run has, and what the run is built with."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from types import SimpleNamespace as NS

import pytest
import torch
from prl_trainer_torch import sft
from prl_trainer_torch.checkpoint import complete_steps
from prl_trainer_torch.offload import FullOffload
from prl_trainer_torch.sft import SFTRun

from prl.config.errors import DataError


class Recorder:
    """A monitor keeping every logged row."""

    def __init__(self) -> None:
        self.rows: list[tuple[int | None, dict]] = []

    def log(self, metrics, step):
        self.rows.append((step, dict(metrics)))

    def close(self) -> None:
        pass


@pytest.fixture
def make_run(tmp_path, tiny_model, reverse_data, sft_config):
    train, val = reverse_data
    made = []

    def make(val_every: int | None = None, eval_on_start=False, data_path=train, model=None, record=True, **overrides):
        if val_every is not None:
            data = {"name": str(val), "seq_len": 64, "batch_size": 4, "shuffle": False}
            overrides["val"] = {"interval": val_every, "eval_on_start": eval_on_start, "data": data}
        overrides = {"data": {"num_workers": 0}, "scheduler": {"type": "constant"}, "max_steps": 2, **overrides}
        cfg = sft_config(tmp_path, tiny_model, data_path, **overrides)
        if model is not None:  # [model] fields beside its name (the helper's argument is the path)
            cfg.model = type(cfg.model).model_validate({**cfg.model.model_dump(), **model})
        made.append(SFTRun(cfg))
        if record:
            made[-1].monitors = [Recorder()]
        return made[-1]

    yield make
    for r in made:
        r.close()


def logged(run) -> list[tuple[int | None, dict]]:
    return run.monitors[0].rows


def trainer_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "prl.trainer"]


def test_eval_on_start_validates_the_weights_training_starts_from(make_run):
    run = make_run(val_every=10, eval_on_start=True, max_steps=2, ckpt={})
    start = run.validate()
    run.train()
    steps = [(step, sorted(k for k in m if k.startswith("val/"))) for step, m in logged(run)]
    val = ["val/loss", "val/perplexity"]
    assert steps == [(0, val), (1, []), (2, val), (2, [])]  # the last row: the checkpoint's save time
    assert logged(run)[0][1] == start
    # A resumed run does not start from the base weights: no validation before its first step.
    resumed = make_run(val_every=10, eval_on_start=True, max_steps=3, ckpt={}, resume={})
    resumed.train()
    assert [step for step, _ in logged(resumed)] == [3, 3]  # the step, then its save time


def test_no_validation_before_the_first_step_unless_asked(make_run):
    run = make_run(val_every=2, max_steps=1)
    run.train()
    assert [(step, "val/loss" in m) for step, m in logged(run)] == [(1, True)]  # the last step


def test_a_gc_interval_logs_the_collection_time_every_step(make_run):
    run = make_run(model={"gc": {"interval": 2}})
    run.train()
    gc_times = [m["time/gc"] for _, m in logged(run)]
    assert gc_times[0] == 0.0 and gc_times[1] > 0.0  # collected at step 2 only
    plain = make_run(max_steps=1)
    plain.train()
    assert "time/gc" not in logged(plain)[0][1]


def test_online_eval_publishes_the_weights_at_each_planned_step(make_run, monkeypatch):
    published = []

    def publish(hf, transport, dist, version):
        published.append((hf, transport, dist, version))
        return 0.25

    monkeypatch.setattr(sft, "publish_weights", publish)
    source = {"name": "reverse-text", "env": {"taskset": {"id": "reverse-text"}}}
    run = make_run(max_steps=3, eval={"interval": 2, "source": [source]})
    assert run.transport is not None  # built from [weight_broadcast]
    run.train()
    assert published == [(run.hf, run.transport, run.dist, v) for v in (0, 2, 3)]
    assert [m.get("time/broadcast_weights") for _, m in logged(run)] == [None, 0.25, 0.25]
    assert make_run().transport is None  # nothing to publish without [eval]


METRICS = {"loss/mean": 1.23456, "optim/lr": 3e-3, "perf/throughput": 1234.4, "optim/grad_norm": 0.5}


def test_each_step_logs_one_line_on_the_main_rank(make_run, caplog):
    run = make_run()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="prl.trainer"):
        run._report(1, METRICS)
        run._report(2, {**METRICS, "val/loss": 2.0})
    assert trainer_lines(caplog) == [
        "step 1/2 loss 1.2346 lr 3.00e-03 1234 tok/s gnorm 0.500",
        "step 2/2 loss 1.2346 lr 3.00e-03 1234 tok/s val 2.0000 gnorm 0.500",
    ]
    caplog.clear()
    run.dist = NS(is_main=False, world=1)
    with caplog.at_level(logging.INFO, logger="prl.trainer"):
        run._report(1, METRICS)
    assert trainer_lines(caplog) == []


def test_on_a_terminal_the_progress_bar_shows_the_step_and_its_figures(make_run, monkeypatch, caplog):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    make_run(max_steps=3, ckpt={}).train()
    run = make_run(max_steps=5, ckpt={}, resume={})
    task = run.bar.bar.tasks[0]
    assert (task.total, task.completed) == (5, 3)  # a resumed run's bar starts at its step
    caplog.clear()  # the resume's own line
    with caplog.at_level(logging.INFO, logger="prl.trainer"):
        run._report(4, METRICS)
    assert (task.completed, task.fields["info"]) == (4, "loss 1.2346 lr 3.00e-03 1234 tok/s")
    assert trainer_lines(caplog) == []  # the bar replaces the log line


def test_a_save_logs_its_time_and_names_the_model_and_tokenizer(make_run, tmp_path, tiny_model):
    (tmp_path / "tok").symlink_to(tiny_model)
    for tokenizer, name in ((None, "t"), (str(tmp_path / "tok"), "u")):
        run = make_run(max_steps=1, ckpt={}, tokenizer={"name": tokenizer}, run={"name": name})
        run.train_step()
        t0 = time.perf_counter()
        run.save(final=True)
        elapsed = time.perf_counter() - t0
        ((step, m),) = logged(run)
        assert step == 1 and 0 < m["time/save_ckpt"] <= elapsed
        meta = json.loads((run.ckpt_root / "step_1" / "trainer" / "model.json").read_text())
        assert meta == {"model": str(tiny_model), "tokenizer": tokenizer or str(tiny_model)}


def test_without_ckpt_nothing_is_saved_and_with_an_interval_each_multiple(make_run):
    run = make_run(max_steps=3)
    run.train()
    assert not run.ckpt_root.exists() or complete_steps(run.ckpt_root) == []
    run = make_run(max_steps=3, ckpt={"interval": 2}, run={"name": "every2"})
    run.train()
    assert complete_steps(run.ckpt_root) == [2, 3]


def test_a_resume_from_an_earlier_step_keeps_the_later_checkpoints(make_run):
    first = make_run(max_steps=4, ckpt={"interval": 1})
    first.train()
    assert complete_steps(first.ckpt_root) == [1, 2, 3, 4]
    # Retention looks only at steps up to the one just saved: the abandoned attempt's step 4
    # is not newer than the run's own step 3 to it, which keep_last = 1 must keep.
    again = make_run(max_steps=3, ckpt={"interval": 1, "keep_last": 1}, resume={"step": 2})
    again.train()
    assert complete_steps(again.ckpt_root) == [3, 4]


def test_a_schedule_rebuilt_for_the_last_remaining_step_ends_at_its_floor(make_run):
    sched = {"type": "linear", "warmup_steps": 0, "decay_steps": 3, "min_lr_ratio": 0.1}
    make_run(max_steps=3, ckpt={}, scheduler=sched).train()
    run = make_run(max_steps=4, ckpt={}, scheduler=sched, resume={"skip_scheduler": True})
    assert run.progress["step"] == 3
    # A fresh linear schedule over one step: that step is its last, at min_lr_ratio.
    assert run.optimizer.param_groups[0]["lr"] == pytest.approx(3e-3 * 0.1)


def test_each_rank_resumes_its_own_data_cursor(make_run):
    make_run(max_steps=2, ckpt={}).train()
    run = make_run(max_steps=4, ckpt={}, resume={})
    cursors = run.ckpt_root / "step_2" / "trainer" / "dataloader"
    torch.save({"epoch": 5, "rows": 7}, cursors / "rank_1.pt")  # a second rank's, further on
    assert (run.loader.epoch, run.loader.rows) == (0, 2 * run.loader.rows_per_step)
    run.dist = dataclasses.replace(run.dist, rank=1)
    run._resume()
    assert (run.loader.epoch, run.loader.rows) == (5, 7)


def test_a_resume_says_where_it_resumed_from(make_run, caplog):
    make_run(max_steps=2, ckpt={}).train()
    with caplog.at_level(logging.INFO, logger="prl.trainer"):
        run = make_run(max_steps=3, ckpt={}, resume={})
    assert f"resumed from {run.ckpt_root / 'step_2'} at step 2" in trainer_lines(caplog)


def test_only_the_main_rank_writes_metrics(make_run, monkeypatch):
    files = {"file": {}}
    assert [m.producer for m in make_run(record=False, monitors=files).monitors] == ["trainer"]
    monkeypatch.setenv("RANK", "1")  # what torchrun tells the second rank
    assert make_run(record=False, monitors=files, run={"name": "rank1"}).monitors == []


def test_closing_a_multi_rank_run_leaves_its_process_group(make_run, monkeypatch):
    left = []
    monkeypatch.setattr(sft.tdist, "is_initialized", lambda: True)
    monkeypatch.setattr(sft.tdist, "destroy_process_group", lambda: left.append(True))
    for world in (1, 2):  # one rank never joined a group: one the caller holds stays
        run = make_run()
        run.dist = NS(world=world)
        run.close()
    assert left == [True]


def test_without_max_steps_a_run_trains_one_epoch(make_run):
    run = make_run(max_steps=None)
    assert run.total == run.loader.steps_per_epoch() == 100  # 400 samples, 4 per step


def test_an_epoch_shorter_than_one_step_is_refused(make_run, tmp_path, reverse_data):
    few = tmp_path / "few.jsonl"
    few.write_text("".join(reverse_data[0].read_text().splitlines(keepends=True)[:2]))
    with pytest.raises(DataError) as refused:
        make_run(max_steps=None, data_path=few)
    assert str(refused.value) == (
        "data: one epoch has fewer packed rows than data.batch_size; set max_steps or add data"
    )


def test_fake_data_draws_tokens_of_the_models_vocabulary(make_run):
    run = make_run(data_path="unused", data={"type": "fake", "seq_len": 32, "batch_size": 4, "num_workers": 0})
    ids = torch.cat([r.input_ids for r in run.loader.next_step().rows])
    assert 0 <= int(ids.min()) and int(ids.max()) < run.hf.config.vocab_size
    assert int(ids.max()) > run.hf.config.vocab_size // 2  # drawn over the whole vocabulary
    assert run.labels == []


def test_the_model_is_built_as_model_asks_and_its_weights_decay(make_run):
    knobs = {"activation_checkpointing": True, "activation_checkpointing_freq": 2, "attn_implementation": "eager"}
    run = make_run(model={**knobs, "dtype": "bfloat16"})
    assert run.hf.config._attn_implementation == "eager"
    assert {p.dtype for p in run.hf.parameters()} == {torch.bfloat16}
    assert isinstance(make_run(model={"full_offload": True}).optimizer, FullOffload)
    assert [g["weight_decay"] for g in run.optimizer.param_groups] == [sft.SFT_WEIGHT_DECAY]
    layers = run.hf.model.layers
    assert [layer.gradient_checkpointing for layer in layers] == [i % 2 == 0 for i in range(len(layers))]


def test_a_lora_run_checkpoints_its_adapter_config_and_resumes_from_it(make_run):
    lora = {"lora": {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]}}
    make_run(model=lora, max_steps=1, ckpt={}).train()
    run = make_run(model=lora, max_steps=2, ckpt={}, resume={})
    assert run.progress["step"] == 1
    cfg = json.loads((run.ckpt_root / "step_1" / "trainer" / "adapter_config.json").read_text())
    assert (cfg["r"], cfg["lora_alpha"], sorted(cfg["target_modules"])) == (4, 8.0, ["q_proj", "v_proj"])
