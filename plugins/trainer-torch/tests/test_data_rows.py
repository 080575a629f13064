"""The SFT data path by hand: which tokens a row trains (the shift by one and the loss
mask), where a long row is cut, how rows pack, and where the rows come from."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS
from typing import Literal

import pytest
import torch
from prl_trainer_torch import data
from prl_trainer_torch.data import SUBSET_COLUMN, RowRenderer, Sample, load_dataset_rows, pack, subset_labels

from prl.config.errors import DataError
from prl.config.roots import SFTDataConfig
from prl.contracts.renderer import RendererConfig
from prl.plugins import get_registry

# user "q" then assistant "a": <t> q q <t> a a, the template tokens belong to no message
IDS = [10, 11, 12, 13, 14, 15]
OWNER = [-1, 0, 0, -1, 1, 1]
CHAT = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


class FakeRenderer:
    """Renders every conversation to IDS, attributing the tokens as OWNER says."""

    def __init__(self, sampled=None) -> None:
        self.sampled, self.calls = sampled, []

    def render(self, messages, tools=None):
        self.calls.append((messages, tools))
        out = NS(token_ids=list(IDS), message_index=list(OWNER))
        if self.sampled is not None:
            out.sampled_mask = list(self.sampled)
        return out


@pytest.fixture
def fake_rows(monkeypatch):
    def make(sampled=None, **data_cfg):
        rr = RowRenderer(SFTDataConfig(name="unused", **data_cfg), None, "unused")
        renderer = FakeRenderer(sampled)
        monkeypatch.setattr(rr, "renderer_for", lambda row: renderer)
        return rr, renderer

    return make


def test_targets_are_the_next_token_and_the_mask_is_the_targets(fake_rows):
    rr, _ = fake_rows()
    s = rr.sample({"messages": CHAT}, 0, 64)
    assert s.inputs == [10, 11, 12, 13, 14] and s.targets == [11, 12, 13, 14, 15]
    assert s.mask == [False, False, False, True, True]  # predicting the assistant's tokens
    assert s.subset == 0


def test_a_row_is_cut_to_seq_len_inputs(fake_rows):
    rr, _ = fake_rows()
    s = rr.sample({"messages": CHAT}, 0, 4)
    assert s.inputs == [10, 11, 12, 13] and s.targets == [11, 12, 13, 14] and s.mask == [False] * 3 + [True]
    # Cut before the assistant speaks, nothing is left to train.
    assert rr.sample({"messages": CHAT}, 0, 3) is None


def test_a_renderer_marking_sampled_tokens_trains_only_those_of_the_assistant(fake_rows):
    rr, _ = fake_rows(sampled=[0, 0, 0, 0, 0, 1])  # token 14 is the assistant's role header
    assert rr.sample({"messages": CHAT}, 0, 64).mask == [False, False, False, False, True]
    # A trained user turn has no sampled tokens and still trains on all of its own.
    roles = {"user": True, "assistant": True}
    rr, _ = fake_rows(sampled=[0, 0, 0, 0, 0, 1], loss_mask=roles)
    assert rr.sample({"messages": CHAT}, 0, 64).mask == [True, True, False, False, True]


def test_the_interleaved_part_of_a_row_is_kept(fake_rows):
    rr, _ = fake_rows()
    assert rr.sample({"messages": CHAT, SUBSET_COLUMN: 2}, 0, 64).subset == 2


def test_a_per_message_flag_never_trains_the_prompt(fake_rows):
    rr, _ = fake_rows()
    msgs, train = rr.messages({"prompt": "q", "completion": "a", "message_loss_mask": [True, True]}, 0)
    assert msgs == CHAT and train == [False, True]
    msgs, train = rr.messages({"prompt": [CHAT[0]], "completion": [CHAT[1]], "message_loss_mask": [True, False]}, 0)
    assert train == [False, False]
    with pytest.raises(DataError, match="must be a list of 2 booleans"):
        rr.messages({"messages": CHAT, "message_loss_mask": [1, 0]}, 0)


def test_arrow_null_keys_are_dropped_before_rendering(fake_rows):
    rr, renderer = fake_rows()
    msgs = [{"role": "user", "content": "q", "tool_calls": None}, {"role": "assistant", "content": "a", "name": None}]
    rr.sample({"messages": msgs, "tools": ""}, 0, 64)
    assert renderer.calls == [(CHAT, None)]


@pytest.mark.parametrize("tools", [None, "", [], "[]"])
def test_no_tools_reach_the_renderer_as_none(fake_rows, tools):
    rr, _ = fake_rows()
    assert rr.tools({"tools": tools}, 0) is None


@pytest.mark.parametrize("tools", ['{"name": "f"}', ["f"], 3])
def test_tools_must_be_a_list_of_schemas(fake_rows, tools):
    rr, _ = fake_rows()
    with pytest.raises(DataError, match="row 4: column 'tools' must be a list of tool schemas"):
        rr.tools({"tools": tools}, 4)


def test_a_renderer_is_built_once_per_set_of_column_overrides(tiny_model):
    cfg = SFTDataConfig(name="unused", columns={"renderer": {"name": "tpl"}})
    rr = RowRenderer(cfg, get_registry().get("renderers", "qwen3").Config(), str(tiny_model))
    plain = rr.renderer_for({"tpl": None})
    assert rr.renderer_for({}) is plain
    assert rr.renderer_for({"tpl": "qwen3"}) is not plain  # a field the row sets gets its own
    assert rr.renderer_for({"tpl": "qwen3"}) is rr.renderer_for({"tpl": "qwen3"})


class EffortConfig(RendererConfig):
    """A renderer config with one field a dataset column may set per row."""

    name: Literal["effort-test"] = "effort-test"
    effort: str | None = None

    def build(self, *, tokenizer: str):
        renderer = FakeRenderer()
        renderer.effort = self.effort
        return renderer


def test_a_renderer_column_sets_the_renderers_field_per_row():
    cfg = SFTDataConfig(name="unused", columns={"renderer": {"effort": "level", "missing": "other"}})
    rr = RowRenderer(cfg, EffortConfig(), "unused")
    assert rr.renderer_for({"level": "high", "other": 1}).effort == "high"
    assert rr.renderer_for({"level": None}).effort is None and rr.renderer_for({}) is rr.renderer_for({"level": None})
    rr.sample({"messages": CHAT, "level": "low"}, 0, 64)
    (low,) = [r for key, r in rr._renderers.items() if key == (("effort", "low"),)]
    assert low.effort == "low" and len(low.calls) == 1  # the row rendered with its own effort


def test_samples_that_fill_a_row_exactly_share_it():
    samples = [Sample([1, 2, 3], [2, 3, 4], [True] * 3, 1), Sample([5, 6, 7], [6, 7, 8], [True] * 3, 2)]
    rows = list(pack(iter(samples), 6, pad_id=9))
    assert len(rows) == 1 and rows[0].num_tokens == 6 and rows[0].lengths == (3, 3) and rows[0].subsets == (1, 2)
    (row,) = pack(iter([Sample([1, 2], [2, 3], [True, False], 3)]), 5, pad_id=9)
    assert row.input_ids.tolist() == [1, 2, 9, 9, 9] and row.targets.tolist() == [2, 3, 9, 9, 9]
    assert row.position_ids.tolist() == [0, 1, 0, 1, 2] and row.loss_mask.tolist() == [True] + [False] * 4
    assert (row.num_samples, row.num_tokens, row.lengths, row.subsets) == (1, 2, (2,), (3,))
    assert list(pack(iter([]), 5)) == []


# ---- where rows come from ---------------------------------------------------------------
ROWS = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(4)]


def test_rows_load_from_jsonl_csv_and_parquet(tmp_path):
    import datasets

    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "d.json").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    datasets.Dataset.from_list(ROWS).to_csv(str(tmp_path / "d.csv"))
    datasets.Dataset.from_list(ROWS).to_parquet(str(tmp_path / "d.parquet"))
    for suffix in ("jsonl", "json", "csv", "parquet"):
        ds = load_dataset_rows(SFTDataConfig(name=str(tmp_path / f"d.{suffix}")))
        assert [dict(r) for r in ds] == ROWS, suffix
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(DataError, match=r"unsupported file type '\.txt'"):
        load_dataset_rows(SFTDataConfig(name=str(tmp_path / "d.txt")))


def test_a_saved_dataset_loads_its_split_and_names_a_missing_one(tmp_path):
    import datasets

    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "one"))
    assert len(load_dataset_rows(SFTDataConfig(name=str(tmp_path / "one")))) == 4
    parts = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS[:1]), "dev": datasets.Dataset.from_list(ROWS)}
    )
    parts.save_to_disk(str(tmp_path / "two"))
    assert [dict(r) for r in load_dataset_rows(SFTDataConfig(name=str(tmp_path / "two")))] == ROWS[:1]
    assert len(load_dataset_rows(SFTDataConfig(name=str(tmp_path / "two"), splits=["dev"]))) == 4
    with pytest.raises(DataError, match="split 'test' not in .* \\(has train, dev\\)"):
        load_dataset_rows(SFTDataConfig(name=str(tmp_path / "two"), splits=["test"]))


def test_interleaved_splits_tag_each_row_with_its_part(tmp_path):
    import datasets

    easy, hard = datasets.Dataset.from_list(ROWS[:2]), datasets.Dataset.from_list(ROWS[2:])
    datasets.DatasetDict({"easy": easy, "hard": hard}).save_to_disk(str(tmp_path / "mix"))
    cfg = SFTDataConfig(name=str(tmp_path / "mix"), splits=["easy", "hard"], probabilities=[0.5, 0.5])
    rows = [dict(r) for r in load_dataset_rows(cfg)]
    # (all_exhausted repeats the shorter part until the longer one ends)
    assert {(r["prompt"], r[SUBSET_COLUMN]) for r in rows} == {("p0", 0), ("p1", 0), ("p2", 1), ("p3", 1)}


def _mix(tmp_path, size: int):
    import datasets

    easy = datasets.Dataset.from_list([{"prompt": f"e{i}", "completion": "c"} for i in range(size)])
    hard = datasets.Dataset.from_list([{"prompt": f"h{i}", "completion": "c"} for i in range(size)])
    datasets.DatasetDict({"easy": easy, "hard": hard}).save_to_disk(str(tmp_path / "mix"))
    return str(tmp_path / "mix")


def _parts(cfg: SFTDataConfig) -> list[int]:
    return [r[SUBSET_COLUMN] for r in load_dataset_rows(cfg)]


def test_the_mixture_follows_the_probabilities_and_its_seed(tmp_path):
    name = _mix(tmp_path, 20)
    # 9 in 10 rows from easy: the mixture ends when easy runs out, with few hard rows in it.
    skewed = _parts(
        SFTDataConfig(name=name, splits=["easy", "hard"], probabilities=[0.9, 0.1], stopping_strategy="first_exhausted")
    )
    assert skewed.count(0) == 20 and skewed.count(1) < 8
    # The same seed draws the same order on every rank and every resume; another seed another.
    even = {"name": name, "splits": ["easy", "hard"], "probabilities": [0.5, 0.5]}
    first = _parts(SFTDataConfig(**even, seed=3))
    assert _parts(SFTDataConfig(**even, seed=3)) == first
    assert _parts(SFTDataConfig(**even, seed=4)) != first


def test_a_local_directory_of_data_files_loads_like_a_dataset_repository(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert [dict(r) for r in load_dataset_rows(SFTDataConfig(name=str(tmp_path / "repo")))] == ROWS


def test_a_hub_name_loads_the_snapshot_the_launcher_fetched(tmp_path, monkeypatch):
    from prl import hub

    snap = tmp_path / "snap"
    snap.mkdir()
    (snap / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    asked = []
    monkeypatch.setattr(hub, "local_dir", lambda name, kind, rev: asked.append((name, kind, rev)) or snap)
    cfg = SFTDataConfig(name="org/data", revision="v1")
    assert len(load_dataset_rows(cfg)) == 4
    assert asked == [("org/data", "dataset", "v1")]
    # Not cached (a trainer started by hand): fetched here, once, as data.name.
    fetched = []

    def fetch(needs):
        fetched.extend(needs)
        return {n: snap for n in needs}

    monkeypatch.setattr(hub, "local_dir", lambda name, kind, rev: None)
    monkeypatch.setattr(hub, "fetch", fetch)
    assert data._hub_snapshot(cfg) == snap
    assert fetched == [hub.Need("data.name", "dataset", "org/data", "v1")]


@pytest.mark.parametrize(
    ("subsets", "splits", "labels"),
    [
        (None, None, []),
        (["a"], None, []),
        (["a", "b"], None, ["a", "b"]),
        (None, ["train", "test"], ["train", "test"]),
        (["a", "a"], ["x", "y"], ["x", "y"]),
        (["a", "b"], ["x", "x"], ["a", "b"]),
        (["a", "a"], None, ["a-train-0", "a-train-1"]),
        (["a", "a", "b"], ["x", "y", "x"], ["a-x", "a-y", "b-x"]),
        (["a", "a"], ["x", "x"], ["a-x-0", "a-x-1"]),
        (None, ["train", "train"], ["default-train-0", "default-train-1"]),
    ],
)
def test_subset_labels_are_the_first_names_that_tell_parts_apart(subsets, splits, labels):
    assert subset_labels(NS(subsets=subsets, splits=splits)) == labels


def test_packed_rows_are_long_tensors():
    (row,) = pack(iter([Sample([1], [2], [True])]), 2)
    assert row.targets.dtype == torch.long and row.position_ids.dtype == torch.long
