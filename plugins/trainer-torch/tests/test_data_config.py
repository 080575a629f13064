"""Data configuration a user can get wrong or rely on: a misspelt ``data.columns`` key is
named with the known ones, and each hub subset is loaded by its name."""

from __future__ import annotations

import pytest
from prl_trainer_torch.data import SUBSET_COLUMN, RowRenderer, load_dataset_rows

from prl.config.errors import DataError
from prl.config.roots import SFTDataConfig


def test_an_unknown_column_key_is_named_with_the_known_ones():
    cfg = SFTDataConfig(name="unused", columns={"promt": "q", "answer": "a"})
    known = "messages, prompt, completion, tools, message_loss_mask, renderer"
    with pytest.raises(DataError, match=rf"^data.columns: unknown key\(s\) answer, promt \(known: {known}\)$"):
        RowRenderer(cfg, None, "unused")


def test_each_hub_subset_loads_under_its_own_name(tmp_path, monkeypatch):
    import datasets

    from prl import hub

    asked = []

    def load_dataset(path, subset, split):
        asked.append((path, subset, split))
        return datasets.Dataset.from_list([{"prompt": f"{subset}-p", "completion": "c"}])

    monkeypatch.setattr(hub, "local_dir", lambda name, kind, rev: tmp_path)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    rows = load_dataset_rows(SFTDataConfig(name="org/data", subsets=["easy", "hard"], probabilities=[0.5, 0.5]))
    assert sorted(asked) == [(str(tmp_path), "easy", "train"), (str(tmp_path), "hard", "train")]
    assert {(r["prompt"], r[SUBSET_COLUMN]) for r in rows} == {("easy-p", 0), ("hard-p", 1)}
