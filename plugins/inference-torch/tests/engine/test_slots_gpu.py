"""On a GPU: decode steps replayed from CUDA graphs give what eager decoding gives.

Skipped without CUDA (CI has none); run on the device with
``pytest plugins/inference-torch/tests/engine/test_slots_gpu.py``.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_slots import run, same, workload  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def model(tiny_model):
    from prl_inference_torch.attention import register
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32, attn_implementation=register())
    return m.cuda().eval(), AutoTokenizer.from_pretrained(tiny_model)


def test_graph_replay_equals_eager_slots_the_growing_cache_and_generate(model):
    from prl_inference_torch.engine import Engine

    m, tok = model
    work = workload(20)
    graphs = run(m, tok, work, slots=True, rows=8)
    engine = Engine(m, tok, max_model_len=2048, eos_ids=set(), slots=True)
    assert engine._dec.graphs  # slots on CUDA replay graphs by default
    same(graphs, run(m, tok, work, slots=False, rows=8))
    # transformers' own generate, one request at a time: the same greedy tokens
    for (prompt, params), [(tokens, _, _), *_] in zip(work[:6], graphs[:6], strict=True):
        ids = torch.tensor([prompt], device="cuda")
        out = m.generate(ids, max_new_tokens=params.max_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert out[0, len(prompt) :].tolist() == tokens


def test_an_engine_on_cuda_picks_slots_for_a_dense_model(model):
    from prl_inference_torch.engine import Engine

    m, tok = model
    assert Engine(m, tok, max_model_len=256, eos_ids=set())._dec is not None
    assert Engine(m, tok, max_model_len=256, eos_ids=set(), cuda_graphs=False)._dec is None
    assert Engine(m, tok, max_model_len=256, eos_ids=set(), cuda_graphs=False, slots=True)._dec.graphs is False


def test_graphs_are_captured_again_after_the_pool_grows(model):
    """Rows that outgrow the first 128-column block grow the pool, which drops the graphs
    captured so far; the next steps capture new ones (the engine does not fall back to eager
    decoding) and still give eager decoding's tokens."""
    from prl_inference_torch.engine import Engine
    from prl_inference_torch.request import GenParams, Request

    m, tok = model
    work = [(list(range(3 + i, 40 + i)), GenParams(max_tokens=300, temperature=0.0, ignore_eos=True)) for i in range(3)]
    engine = Engine(m, tok, max_model_len=2048, eos_ids=set(), max_batch_size=4, slots=True)
    engine.start()
    reqs = [Request(p, params) for p, params in work]
    done = threading.Event()
    for r in reqs:
        r.wake = lambda: done.set() if all(x.done for x in reqs) else None
        engine.submit(r)
    try:
        assert done.wait(120), "engine did not finish"
    finally:
        engine.shutdown()
    assert engine._dec.capacity > 128  # the pool grew while graphs were in use
    assert engine._dec.graphs and engine._dec._graphs  # and decoding went on in graphs
    eager = run(m, tok, work, slots=False, rows=4)
    assert [[c.token_ids for c in r.completions] for r in reqs] == [[t for t, _, _ in row] for row in eager]
