"""Which messages of a row train: roles that ``data.loss_mask`` does not list never do, a
per-message flag may train the first message of a ``messages`` row, and a bad completion
or flag column is named in the error."""

from __future__ import annotations

import pytest
from prl_trainer_torch.data import RowRenderer

from prl.config.errors import DataError
from prl.config.roots import SFTDataConfig


def rows(**data) -> RowRenderer:
    return RowRenderer(SFTDataConfig(name="unused", **data), None, "unused")


def test_a_role_missing_from_the_loss_mask_is_not_trained():
    rr = rows(loss_mask={"assistant": True})
    msgs = [{"role": "narrator", "content": "n"}, {"role": "assistant", "content": "a"}]
    assert rr.messages({"messages": msgs}, 0)[1] == [False, True]
    completion = [{"role": "narrator", "content": "n"}, {"role": "assistant", "content": "a"}]
    assert rr.messages({"prompt": "q", "completion": completion}, 0)[1] == [False, False, True]


def test_a_flag_can_train_the_first_message_of_a_conversation():
    msgs = [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "q"}]
    assert rows().messages({"messages": msgs, "message_loss_mask": [True, False]}, 0)[1] == [True, False]


def test_a_bad_completion_is_named_by_row_and_column():
    with pytest.raises(DataError, match="row 4: column 'answer' must be a list of messages or a string, got int"):
        rows(columns={"completion": "answer"}).messages({"prompt": "q", "answer": 5}, 4)


def test_a_bad_flag_column_says_one_flag_per_message():
    with pytest.raises(DataError, match=r"must be a list of 1 booleans \(one per message\)$"):
        rows().messages({"messages": [{"role": "user", "content": "q"}], "message_loss_mask": "yes"}, 0)
