"""The validation pass (eval_rows): one pass over a dataset split over ranks, and fake data,
which never ends, read as one batch."""

from __future__ import annotations

import json

from prl_trainer_torch.data import Sample
from prl_trainer_torch.loader import SampleSource, eval_rows

from prl.config.roots import SFTDataConfig


def cfg(**kw) -> SFTDataConfig:
    return SFTDataConfig(**{"name": "unused", "seq_len": 8, "batch_size": 2, "shuffle": False, **kw})


class _Bytes:
    """Row i as the bytes of its prompt, every target trained."""

    def sample(self, row: dict, index: int, seq_len: int) -> Sample:
        ids = list(row["prompt"].encode())
        return Sample(ids[:-1], ids[1:], [True] * (len(ids) - 1))


def test_a_validation_dataset_is_read_once_and_split_over_ranks(tmp_path):
    # Prompts of 8 bytes: 7 input tokens each, one sample per 8-token row.
    rows = [{"prompt": f"val {i:03d}!", "completion": ""} for i in range(5)]
    (tmp_path / "v.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = cfg(name=str(tmp_path / "v.jsonl"))
    source = SampleSource(data, None, "unused")
    source.renderer = _Bytes()
    shares = [[bytes(r.input_ids[:7].tolist()).decode() for r in eval_rows(source, data, rank, 2)] for rank in (0, 1)]
    assert shares == [["val 000", "val 002", "val 004"], ["val 001", "val 003"]]


def test_validation_over_fake_data_is_one_batch_the_same_each_time():
    # Fake data never ends; a validation pass over it is batch_size random documents,
    # drawn from the same seed every time so that validation losses compare across steps.
    data = cfg(type="fake", batch_size=3, seq_len=16)
    source = SampleSource(data, vocab=7)
    first = eval_rows(source, data, 0, 1)
    again = eval_rows(SampleSource(data, vocab=7), data, 0, 1)
    assert [r.input_ids.tolist() for r in first] == [r.input_ids.tolist() for r in again]
    docs = sum(r.num_samples for r in first)
    assert docs == 3
    assert all(r.input_ids.max() < 7 for r in first)
