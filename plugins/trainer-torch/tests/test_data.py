"""Rows to samples through the renderer, loss masks, packing, row errors."""

from __future__ import annotations

import json

import pytest
import torch
from prl_trainer_torch.data import RowRenderer, Sample, pack

from prl.config.roots import SFTDataConfig
from prl.plugins import get_registry


@pytest.fixture
def rows(tiny_model):
    def make(**data):
        cfg = SFTDataConfig(name="unused", **data)
        renderer_cfg = get_registry().get("renderers", "qwen3").Config()
        return RowRenderer(cfg, renderer_cfg, str(tiny_model))

    return make


def _trained_text(rr, sample: Sample) -> str:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(rr.tokenizer)
    return tok.decode([t for t, m in zip(sample.targets, sample.mask, strict=False) if m])


def test_prompt_completion_trains_only_the_completion(rows):
    rr = rows()
    s = rr.sample({"prompt": "Reverse the text: abc", "completion": "cba"}, 0, 256)
    text = _trained_text(rr, s)
    assert "cba" in text and "Reverse" not in text and "abc" not in text
    assert text.endswith("<|im_end|>")  # the stop token is learned


def test_messages_mask_by_role_and_per_message_flag(rows):
    msgs = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2"},
    ]
    rr = rows()
    text = _trained_text(rr, rr.sample({"messages": msgs}, 0, 512))
    assert "A1" in text and "A2" in text and "Q1" not in text and "SYS" not in text
    rr = rows(loss_mask={"system": False, "user": True, "assistant": True, "tool": False})
    assert "Q2" in _trained_text(rr, rr.sample({"messages": msgs}, 0, 512))
    flags = [False, False, False, False, True]
    text = _trained_text(rows(), rows().sample({"messages": msgs, "message_loss_mask": flags}, 0, 512))
    assert "A2" in text and "A1" not in text


def test_renamed_columns_and_json_tools(rows):
    tools = [{"type": "function", "function": {"name": "rev", "parameters": {"type": "object", "properties": {}}}}]
    rr = rows(columns={"prompt": "q", "completion": "a", "tools": "fns"})
    plain = rr.sample({"q": "hi", "a": "yo"}, 0, 1024)
    with_tools = rr.sample({"q": "hi", "a": "yo", "fns": json.dumps(tools)}, 0, 1024)
    as_list = rr.sample({"q": "hi", "a": "yo", "fns": tools}, 0, 1024)
    assert len(with_tools.inputs) > len(plain.inputs)  # the tool schema is in the prompt
    assert with_tools.inputs == as_list.inputs


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": 3, "completion": "x"}, "row 7: column 'prompt'"),
        ({"prompt": "p"}, "row 7: needs column 'messages'"),
        ({"messages": [{"content": "no role"}]}, "row 7: column 'messages' message 0"),
        ({"prompt": "p", "completion": "c", "tools": "{not json"}, "row 7: column 'tools' is not valid JSON"),
        (
            {"messages": [{"role": "user", "content": "q"}], "message_loss_mask": [True, True]},
            "row 7: column 'message_loss_mask'",
        ),
    ],
)
def test_bad_row_names_row_and_column(rows, row, message):
    with pytest.raises(ValueError, match=message):
        rows().sample(row, 7, 64)


def test_long_samples_are_cut_and_untrainable_ones_skipped(rows):
    rr = rows()
    s = rr.sample({"prompt": "p" * 10, "completion": "c" * 100}, 0, 40)
    assert len(s.inputs) == 40
    assert rr.sample({"prompt": "p" * 100, "completion": "c"}, 0, 40) is None


def test_packing_resets_positions_and_pads():
    samples = [
        Sample([1, 2, 3], [2, 3, 4], [True] * 3),
        Sample([5, 6], [6, 7], [False, True]),
        Sample([8] * 4, [9] * 4, [True] * 4),
    ]
    rows = list(pack(iter(samples), 6))
    assert [r.num_samples for r in rows] == [2, 1]
    assert rows[0].position_ids.tolist() == [0, 1, 2, 0, 1, 0]
    assert rows[0].loss_mask.tolist() == [True, True, True, False, True, False]
    assert rows[1].position_ids.tolist() == [0, 1, 2, 3, 0, 1]
    assert rows[1].num_tokens == 4 and not rows[1].loss_mask[4:].any()
    assert rows[0].input_ids.dtype == torch.long
