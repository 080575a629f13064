"""Edges of the SFT data path: the shortest trainable sample, a cut row from a renderer
that marks sampled tokens, the type named in a bad-column error, and an unshuffled epoch
that yields every row once, in order."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest
from prl_trainer_torch.data import RowRenderer
from prl_trainer_torch.loader import SampleSource

from prl.config.errors import DataError
from prl.config.roots import SFTDataConfig

CHAT = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


def renderer_of(ids, owner, sampled=None):
    out = NS(token_ids=ids, message_index=owner)
    if sampled is not None:
        out.sampled_mask = sampled
    return NS(render=lambda messages, tools=None: out)


def rows_with(monkeypatch, renderer) -> RowRenderer:
    rr = RowRenderer(SFTDataConfig(name="unused"), None, "unused")
    monkeypatch.setattr(rr, "renderer_for", lambda row: renderer)
    return rr


def test_two_tokens_make_the_shortest_trainable_sample(monkeypatch):
    rr = rows_with(monkeypatch, renderer_of([5, 6], [0, 1]))
    s = rr.sample({"messages": CHAT}, 0, 64)
    assert (s.inputs, s.targets, s.mask) == ([5], [6], [True])
    assert rows_with(monkeypatch, renderer_of([5], [1])).sample({"messages": CHAT}, 0, 64) is None


def test_a_cut_row_keeps_the_sampled_token_mask(monkeypatch):
    # 6 tokens cut to 4: the sampled flags still line up with the tokens that are kept.
    rr = rows_with(monkeypatch, renderer_of([1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]))
    s = rr.sample({"messages": CHAT}, 0, 3)
    assert s.inputs == [1, 2, 3] and s.mask == [False, False, True]


def test_a_bad_column_error_names_the_type_it_got():
    rr = RowRenderer(SFTDataConfig(name="unused"), None, "unused")
    with pytest.raises(DataError, match="row 7: column 'prompt' must be a list of messages or a string, got int"):
        rr.messages({"prompt": 3, "completion": "x"}, 7)


def test_an_unshuffled_epoch_yields_every_row_once_in_order(tmp_path, monkeypatch):
    rows = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(5)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = SampleSource(SFTDataConfig(name=str(tmp_path / "d.jsonl"), shuffle=False), None, "unused")
    monkeypatch.setattr(source.renderer, "sample", lambda row, i, seq_len: row["prompt"])
    assert list(source.epoch(0)) == ["p0", "p1", "p2", "p3", "p4"]
    assert [p for p, _ in source.epoch_positions(0)] == [0, 1, 2, 3, 4]
