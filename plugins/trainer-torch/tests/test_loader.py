"""The SFT loader with a hand-made stream of samples: which rows a step and a rank take,
the step's global loss-token count, epochs, the resume cursor, validation shares, and
the source's order."""

from __future__ import annotations

import json

import pytest
from prl_trainer_torch.data import Sample
from prl_trainer_torch.loader import SampleSource, SFTLoader, eval_rows

from prl.config.errors import DataError
from prl.config.roots import SFTDataConfig


class Stream:
    """Epoch e: ``n`` samples of 4 tokens (ids 100e + i), sample i trains on i % 4 + 1
    targets and belongs to subset i % 2. Each packs into a row of its own (row length 4)."""

    def __init__(self, n: int = 5, trainable: bool = True) -> None:
        self.n, self.trainable, self.epochs = n, trainable, []

    def epoch(self, epoch: int, workers: int = 0):
        self.epochs.append(epoch)
        for i in range(self.n):
            k = (i % 4 + 1) if self.trainable else 0
            yield Sample([100 * epoch + i] * 4, [0] * 4, [True] * k + [False] * (4 - k), i % 2)


def cfg(**kw) -> SFTDataConfig:
    base = {"name": "unused", "seq_len": 8, "micro_batch_size": 1, "batch_size": 2, "num_workers": 0}
    # seq_len must be >= 8; half-length rows (4 tokens) keep one sample per row
    return SFTDataConfig(**{**base, **kw})


def loader(stream, rank=0, world=1, **kw) -> SFTLoader:
    ld = SFTLoader(stream, cfg(**kw), rank, world)
    ld.row_len = 4
    return ld


def first_ids(step) -> list[int]:
    return [int(r.input_ids[0]) for r in step.rows]


def test_a_step_takes_the_next_rows_and_counts_the_whole_steps_loss_tokens():
    ld = loader(Stream(), batch_size=4, world=2, rank=1)
    step = ld.next_step()
    assert first_ids(step) == [2, 3]  # rank 1's half of rows 0..3
    assert step.loss_tokens == 1 + 2 + 3 + 4  # every rank's rows: the global count
    assert step.tokens == 16 and step.samples == 4
    assert first_ids(loader(Stream(), batch_size=4, world=2, rank=0).next_step()) == [0, 1]
    assert ld.rows_per_step == 4 and ld.accum == 2


def test_micro_batches_of_several_sequences_make_fewer_longer_rows():
    ld = SFTLoader(Stream(), cfg(seq_len=8, micro_batch_size=2, batch_size=4), 0, 1)
    assert ld.row_len == 16 and ld.rows_per_step == 2


def test_steps_cross_into_the_next_epoch_and_count_subsets():
    stream = Stream(n=3)
    ld = loader(stream)
    steps = [first_ids(ld.next_step()) for _ in range(3)]
    assert steps == [[0, 1], [2, 100], [101, 102]]
    assert ld.epoch == 1 and ld.rows == 3
    assert ld.seen_samples == {0: 4, 1: 2} and ld.seen_tokens == {0: 16, 1: 8}


def test_a_resumed_loader_continues_where_the_cursor_stopped():
    ld = loader(Stream(n=5))
    for _ in range(3):
        ld.next_step()
    state = json.loads(json.dumps(ld.state_dict()))  # what a checkpoint keeps (string keys)
    assert state["epoch"] == 1 and state["rows"] == 1
    resumed = loader(Stream(n=5))
    resumed.load_state_dict(state)
    assert resumed.seen_samples == ld.seen_samples and resumed.seen_tokens == ld.seen_tokens
    assert [first_ids(resumed.next_step()) for _ in range(2)] == [first_ids(ld.next_step()) for _ in range(2)]
    assert resumed.state_dict() == ld.state_dict()


def test_a_cursor_without_subset_counts_resumes_with_none():
    ld = loader(Stream(n=5))
    ld.load_state_dict({"epoch": 0, "rows": 3})  # a checkpoint from before the counts
    assert ld.seen_samples == {} and ld.seen_tokens == {}
    assert first_ids(ld.next_step()) == [3, 4]


def test_a_stream_with_nothing_to_train_is_an_error_not_a_hang():
    ld = loader(Stream(n=0))
    with pytest.raises(DataError, match="yields no trainable samples"):
        ld.next_step()


def test_the_rows_of_a_step_must_split_evenly_over_ranks():
    with pytest.raises(DataError, match=r"\(3\) must be divisible by the world size \(2\)"):
        SFTLoader(Stream(), cfg(batch_size=3), 0, 2)


def test_steps_per_epoch_counts_full_steps_of_epoch_0():
    stream = Stream(n=5)
    assert loader(stream).steps_per_epoch() == 2  # 5 rows, 2 per step
    assert stream.epochs == [0]


def test_validation_rows_are_split_over_ranks_from_epoch_0():
    data = cfg(seq_len=8, micro_batch_size=1)  # 8-token rows: two samples each, rows 01 23 4
    assert [int(r.input_ids[0]) for r in eval_rows(Stream(n=5), data, 1, 2)] == [2]
    assert [int(r.input_ids[0]) for r in eval_rows(Stream(n=5), data, 0, 2)] == [0, 4]
    assert len(eval_rows(Stream(n=5), data, 0, 1)) == 3


def test_a_dataset_source_has_its_rows_and_shuffles_each_epoch_by_seed(tmp_path):
    rows = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(20)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = SampleSource(cfg(name=str(tmp_path / "d.jsonl"), seed=3), None, "unused")
    assert len(source) == 20 and source.labels() == []
    orders = [list(source._order(e)) for e in (0, 1)]
    assert sorted(orders[0]) == list(range(20)) and orders[0] != orders[1]
    again = SampleSource(cfg(name=str(tmp_path / "d.jsonl"), seed=2), None, "unused")
    assert list(again._order(1)) == orders[0]  # epoch e shuffles with seed + e
    plain = SampleSource(cfg(name=str(tmp_path / "d.jsonl"), shuffle=False), None, "unused")
    assert list(plain._order(5)) == list(range(20))


def test_epoch_positions_take_every_strideth_row(tmp_path, monkeypatch):
    rows = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(7)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = SampleSource(cfg(name=str(tmp_path / "d.jsonl"), shuffle=False), None, "unused")
    monkeypatch.setattr(source.renderer, "sample", lambda row, i, seq_len: (row["prompt"], i, seq_len))
    got = list(source.epoch_positions(0, offset=1, stride=3))
    assert got == [(1, ("p1", 1, 8)), (4, ("p4", 4, 8))]


def test_fake_data_is_endless_random_documents_all_trained():
    source = SampleSource(cfg(type="fake", seq_len=64, seed=1), vocab=3)
    assert len(source) == 1 << 30 and source.labels() == []
    docs = [s for s, _ in zip(source.epoch(0), range(300), strict=False)]
    lengths = {len(s.inputs) for s in docs}
    assert min(lengths) == 8 and max(lengths) == 64  # 1/8 of seq_len to all of it
    assert all(all(s.mask) and s.targets[:-1] == s.inputs[1:] for s in docs)
    assert {t for s in docs for t in s.inputs + s.targets} == {0, 1, 2}  # the whole vocabulary
    short = SampleSource(cfg(type="fake", seq_len=8, seed=1), vocab=3)
    assert min(len(s.inputs) for s, _ in zip(short.epoch(0), range(100), strict=False)) == 2  # never below 2
    later = SampleSource(cfg(type="fake", seq_len=64, seed=2), vocab=3)
    # epoch e of seed s draws what epoch 0 of seed s + e draws
    assert [s.inputs for s, _ in zip(source.epoch(1), range(3), strict=False)] == [
        s.inputs for s, _ in zip(later.epoch(0), range(3), strict=False)
    ]
    again = [s.inputs for s, _ in zip(source.epoch(0), range(5), strict=False)]
    assert again == [s.inputs for s in docs[:5]]
    assert [s.inputs for s, _ in zip(source.epoch(1), range(5), strict=False)] != again
