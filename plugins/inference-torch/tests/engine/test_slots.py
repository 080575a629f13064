"""The slot-pool decode path (the one CUDA graphs replay on a GPU), run eagerly on the CPU.

It must produce what the growing-cache path produces: the same greedy tokens and the same
logprobs for rows that join at different times, leave early, share a prefill (n > 1), reuse
freed slots and outgrow the pool's first length block.
"""

from __future__ import annotations

import threading

import pytest
import torch
from prl_inference_torch import slots as slots_mod
from prl_inference_torch.attention import register
from prl_inference_torch.engine import Engine, GenParams, Request
from prl_inference_torch.slots import SlotDecoder, batch_bucket, supports_slots


@pytest.fixture(scope="module")
def model(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32, attn_implementation=register())
    return m.eval(), AutoTokenizer.from_pretrained(tiny_model)


def run(model, tok, requests: list[tuple[list[int], GenParams]], slots: bool, waves: int = 1, rows: int = 8):
    """Serve ``requests`` in ``waves`` (each wave submitted after the previous finished)."""
    engine = Engine(model, tok, max_model_len=2048, eos_ids=set(), max_batch_size=rows, slots=slots)
    engine.start()
    reqs = [Request(p, params) for p, params in requests]
    per = -(-len(reqs) // waves)
    try:
        for w in range(waves):
            batch = reqs[w * per : (w + 1) * per]
            done = threading.Event()
            for r in batch:
                r.wake = lambda d=done, b=batch: d.set() if all(x.done for x in b) else None
                engine.submit(r)
            assert done.wait(120), "engine did not finish"
    finally:
        engine.shutdown()
    assert engine._dec is None or sorted(engine._dec.free) == list(range(engine._dec.rows))  # all slots freed
    return [[(c.token_ids, c.logprobs, c.finish_reason) for c in r.completions] for r in reqs]


def workload(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = torch.randint(3, 200, (int(torch.randint(2, 30, (1,), generator=g)),), generator=g).tolist()
        budget = int(torch.randint(3, 24, (1,), generator=g))
        out.append((prompt, GenParams(max_tokens=budget, temperature=0.0, ignore_eos=True, n=1 + i % 3 // 2)))
    return out


def same(a, b) -> None:
    for ra, rb in zip(a, b, strict=True):
        for (ta, la, fa), (tb, lb, fb) in zip(ra, rb, strict=True):
            assert ta == tb and fa == fb
            assert torch.allclose(torch.tensor(la), torch.tensor(lb), atol=1e-4)


def test_greedy_tokens_and_logprobs_match_the_growing_cache(model):
    m, tok = model
    work = workload(14)
    # more requests than rows: rows leave at different steps and waiting ones take their slots
    same(run(m, tok, work, slots=True, rows=6), run(m, tok, work, slots=False, rows=6))


def test_seeded_sampling_matches_and_waves_reuse_freed_slots(model):
    m, tok = model
    work = [
        (p, GenParams(max_tokens=k.max_tokens, temperature=0.9, top_k=20, seed=i, n=2))
        for i, (p, k) in enumerate(workload(8, 1))
    ]
    same(run(m, tok, work, slots=True, waves=3), run(m, tok, work, slots=False, waves=3))


def test_rows_outgrow_the_first_length_block(model, monkeypatch):
    m, tok = model
    monkeypatch.setattr(slots_mod, "LEN_BLOCK", 8)  # growth every 8 columns instead of 128
    work = [(list(range(5, 5 + n)), GenParams(max_tokens=30, temperature=0.0, ignore_eos=True)) for n in (3, 17, 9)]
    same(run(m, tok, work, slots=True), run(m, tok, work, slots=False))


def test_slots_are_left_aligned_and_positions_kept_on_the_host(model):
    m, _ = model
    dec = SlotDecoder(m, rows=4, graphs=False)
    ids = torch.tensor([[0, 0, 7, 8, 9], [4, 5, 6, 7, 8]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    out = m(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0), use_cache=True)
    got = dec.admit(out.past_key_values, pads=[2, 0], lengths=[3, 5], counts=[2, 1])
    assert got == [0, 1, 2]
    first = out.past_key_values.layers[0].keys
    assert torch.equal(dec.keys[0][0, :, :3], first[0, :, 2:5]) and torch.equal(dec.keys[0][1, :, :3], first[0, :, 2:5])
    assert torch.equal(dec.keys[0][2, :, :5], first[1])
    assert dec.pos.tolist()[:3] == [3, 3, 5] and dec.host_pos[:3] == [3, 3, 5]
    logits = dec.step(torch.tensor([1, 1, 2]), [0, 1, 2])
    assert logits.shape[0] == 3 and dec.host_pos[:3] == [4, 4, 6] == dec.pos.tolist()[:3]
    dec.release([1])
    assert dec.pos[1] == 0 and dec.free == [3, 1]


def test_which_models_and_batch_sizes(model):
    m, _ = model
    assert supports_slots(m)
    assert [batch_bucket(n) for n in (1, 2, 3, 5, 64, 65)] == [1, 2, 4, 8, 64, 128]


def test_arrivals_are_gathered_for_a_few_steps_on_the_slot_path(model):
    from prl_inference_torch import engine as engine_mod

    m, tok = model
    engine = Engine(m, tok, max_model_len=256, eos_ids=set(), max_batch_size=64, slots=True)
    engine._rows = [None] * 16  # 16 running rows
    engine._waiting.append(Request([5, 6], GenParams(max_tokens=4)))
    # one waiting row is 1/16 of the running ones: held for PREFILL_HOLD steps, then admitted
    held = [engine._hold_prefill() for _ in range(engine_mod.PREFILL_HOLD + 1)]
    assert held == [True] * engine_mod.PREFILL_HOLD + [False]
    engine._waiting.append(Request([5, 6], GenParams(max_tokens=4, n=1)))
    assert engine._hold_prefill() is False  # 2 waiting rows reach 16 / PREFILL_GATHER
    assert Engine(m, tok, max_model_len=256, eos_ids=set(), slots=False)._hold_prefill() is False
