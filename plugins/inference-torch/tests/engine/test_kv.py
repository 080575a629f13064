"""The running batch's key/value cache: which column holds which token of which row, and
each row's next position, as rows join, leave, repeat and decode.

Keys are filled with distinct numbers (row * 100 + column + 1), so a test can read back
where every cached token went; a wrong offset would attend a row to another row's tokens
or rotate its next token to the wrong position.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from prl_inference_torch.kv import HEADROOM, BatchKV


def prefill(mask: list[list[bool]], layers: int = 2, base: int = 0) -> BatchKV:
    """A BatchKV made from a fake prefill cache whose key at (row, col) is base + row*100 + col + 1."""
    m = torch.tensor(mask)
    rows, length = m.shape
    numbered = base + torch.arange(rows)[:, None] * 100 + torch.arange(length)[None, :] + 1
    keys = numbered.float()[:, None, :, None].expand(rows, 2, length, 3).clone()
    cache = SimpleNamespace(layers=[SimpleNamespace(keys=keys, values=-keys) for _ in range(layers)])
    return BatchKV.from_cache(cache, m, m.sum(-1))


def cached(kv: BatchKV, layer: int = 0) -> list[list[float]]:
    """The first head and feature of every used column of every row."""
    return kv.keys[layer][:, 0, : kv.length, 0].tolist()


def test_a_prefill_is_copied_with_headroom_and_padding_zeroed():
    kv = prefill([[False, True, True], [True, True, True]])
    assert kv.keys[0].shape == (2, 2, 3 + HEADROOM, 3)
    assert cached(kv) == [[0, 2, 3], [101, 102, 103]]
    assert kv.values[1][:, 0, :3, 0].tolist() == [[0, -2, -3], [-101, -102, -103]]
    assert kv.pos.tolist() == [2, 3]
    assert (kv.keys[0][:, :, 3:] == 0).all()


def test_a_decode_step_writes_the_next_column_in_place():
    kv = prefill([[False, True], [True, True]])
    buffer = kv.keys[0]
    cache = kv.as_cache()
    new = torch.full((2, 2, 1, 3), 7.0)
    keys, values = cache.layers[0].update(new, -new)
    assert keys.shape[2] == 3 and values[:, 0, 2, 0].tolist() == [-7, -7]
    nxt = kv.after_step()
    assert nxt.keys[0] is buffer and nxt.values is kv.values  # no copy of the cache per step
    # a float mask would read as an additive attention bias, not as "attend here"
    assert nxt.mask.dtype == torch.bool
    assert cached(nxt) == [[0, 2, 7], [101, 102, 7]]
    assert nxt.mask.tolist() == [[False, True, True], [True, True, True]]
    assert nxt.pos.tolist() == [2, 3]
    # a second update appends after the first
    keys, _ = cache.layers[0].update(new + 1, -new)
    assert keys[:, 0, :, 0].tolist() == [[0, 2, 7, 8], [101, 102, 7, 8]]


def test_transformers_sees_the_cached_length():
    # models derive the next token's cache position from it
    kv = prefill([[False, True, True], [True, True, True]])
    assert kv.as_cache().get_seq_length() == 3
    one_layer = prefill([[True, True]], layers=1)
    assert one_layer.as_cache().get_seq_length() == 2


def test_the_cache_stays_on_the_mask_device_not_the_default_one():
    """On a GPU server the cache lives on cuda while torch's default device is the CPU;
    here the default device is 'meta', where a tensor made without naming the cache's
    device would land and fail to mix with it."""
    kv = prefill([[False, True], [True, True]])
    with torch.device("meta"):
        nxt = kv.after_step()
        same = nxt.select(torch.tensor([0, 1], device="cpu"))
    assert nxt.mask.device.type == "cpu" and same is nxt


def test_a_full_buffer_grows_keeping_its_tokens():
    kv = prefill([[True] * 4])
    kv.keys = [k[:, :, :5].clone() for k in kv.keys]  # one free column left
    kv.values = [v[:, :, :5].clone() for v in kv.values]
    kv.as_cache()
    assert kv.keys[0].shape[2] == 5  # room enough for the one token of a decode step: no copy
    kv.as_cache(new_tokens=2)
    assert kv.keys[0].shape[2] == 4 + 2 + HEADROOM
    assert kv.keys[1].shape[2] == 4 + 2 + HEADROOM
    assert cached(kv, 1) == [[1, 2, 3, 4]] and kv.values[1][0, 0, :4, 0].tolist() == [-1, -2, -3, -4]
    long = prefill([[True] * 200])
    long.as_cache(new_tokens=HEADROOM + 1)  # grows by half its length, more than HEADROOM
    assert long.keys[0].shape[2] == 200 + HEADROOM + 1 + 100
    assert cached(long)[0][:3] == [1, 2, 3] and cached(long)[0][199] == 200


def test_leaving_rows_keep_their_order_and_drop_unused_leading_columns():
    kv = prefill([[False, False, True], [False, True, True], [True, True, True]])
    kept = kv.select(torch.tensor([1, 0]))
    assert kept.mask.tolist() == [[True, True], [False, True]]
    assert cached(kept) == [[102, 103], [0, 3]]
    assert kept.values[0][:, 0, :2, 0].tolist() == [[-102, -103], [0, -3]]
    assert kept.pos.tolist() == [2, 1]
    assert kv.select(torch.tensor([0, 1, 2])) is kv
    assert kv.select(torch.tensor([], dtype=torch.long)) is None
    same_rows = kv.select(torch.tensor([2, 1, 0]))
    assert cached(same_rows)[0] == [201, 202, 203] and same_rows.pos.tolist() == [3, 2, 1]


def test_rows_with_no_used_column_select_to_an_empty_cache():
    kv = prefill([[False, False], [True, True]])
    gone = kv.select(torch.tensor([0]))
    assert gone.length == 0 and gone.keys[0].shape[2] == HEADROOM and gone.pos.tolist() == [0]


def test_repeated_rows_share_one_prefill():
    kv = prefill([[False, True], [True, True]])
    assert kv.repeat(torch.tensor([1, 1])) is kv
    rep = kv.repeat(torch.tensor([2, 1]))
    assert cached(rep) == [[0, 2], [0, 2], [101, 102]]
    assert rep.values[0][:, 0, :2, 0].tolist() == [[0, -2], [0, -2], [-101, -102]]
    assert rep.pos.tolist() == [1, 1, 2]
    assert rep.mask.tolist() == [[False, True], [False, True], [True, True]]


def test_joining_rows_are_left_padded_to_the_longest():
    short = prefill([[True, True]])
    long = prefill([[True, True, True, True], [False, True, True, True]], base=1000)
    for joined, first in ((short.join(long), "short"), (long.join(short), "long")):
        rows = cached(joined)
        values = joined.values[1][:, 0, :4, 0].tolist()
        padded = [0, 0, 1, 2]
        if first == "short":
            assert rows == [padded, [1001, 1002, 1003, 1004], [0, 1102, 1103, 1104]]
            assert values[0] == [-v for v in padded]
            assert joined.mask.tolist()[0] == [False, False, True, True]
            assert joined.pos.tolist() == [2, 4, 3]
        else:
            assert rows[2] == padded and values[2] == [-v for v in padded]
            assert joined.mask.tolist()[2] == [False, False, True, True]
            assert joined.pos.tolist() == [4, 3, 2]
        assert joined.keys[0].shape == (3, 2, 4 + HEADROOM, 3) and len(joined.keys) == 2
    assert short.join(None) is short


def test_a_batch_of_more_rows_than_heads_joins_in_order():
    many = prefill([[True, True]] * 3)
    joined = many.join(prefill([[True]], base=1000))
    assert cached(joined) == [[1, 2], [101, 102], [201, 202], [0, 1001]]
    assert joined.mask.tolist() == [[True, True]] * 3 + [[False, True]]
