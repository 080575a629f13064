"""The prl_varlen attention path: document bounds, and the plumbing from position ids through
transformers to the kernel, checked on CPU against SDPA with a per-document stand-in for
torch's CUDA-only varlen_attn (the real kernel is checked on GPU by the benchmark)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from prl_trainer_torch import attention
from prl_trainer_torch.model import Dist, load_hf_model, parallelize


def test_document_bounds_split_at_position_resets():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3, 4]])
    cu, longest = attention.document_bounds(pos)
    assert cu.tolist() == [0, 3, 5, 10] and cu.dtype == torch.int32
    assert longest == 5
    cu, longest = attention.document_bounds(torch.arange(6).unsqueeze(0))
    assert cu.tolist() == [0, 6] and longest == 6
    two_rows = torch.tensor([[0, 1, 2, 0], [0, 1, 2, 3]])
    assert attention.document_bounds(two_rows)[0].tolist() == [0, 3, 4, 8]


@pytest.mark.parametrize(
    "positions", [[0, 1, 2, 0, 1, 0, 1, 2, 3, 4], list(range(6)), [0], [0, 0, 0, 1], [0, 1, 2, 3, 0]]
)
def test_host_document_bounds_equal_the_device_ones(positions):
    cu, longest = attention.host_document_bounds(positions, torch.device("cpu"))
    expected, expected_longest = attention.document_bounds(torch.tensor([positions]))
    assert cu.tolist() == expected.tolist() and cu.dtype == torch.int32 and longest == expected_longest


def test_the_rl_step_hands_the_policy_its_host_bounds(monkeypatch):
    from prl_trainer_torch.rl_step import forward_tokens, to_micro_batch

    from prl.orchestrator.packing import micro_batch
    from prl.types import TrainingSample

    samples = [TrainingSample([5, 6, 7], [False, True, True], [1.0] * 3, [-1.0] * 3, 1.0, [1.0] * 3, [0.0] * 3,
                              [0.0] * 3, "e"), TrainingSample([8, 9], [False, True], [1.0] * 2, [-1.0] * 2, 1.0,
                              [1.0] * 2, [0.0] * 2, [0.0] * 2, "e")]  # fmt: skip
    mb = to_micro_batch(micro_batch(samples), torch.device("cpu"))
    seen = []

    def policy(ids, pos, targets, temps, entropy=False, bounds=None):
        seen.append(bounds)
        return torch.zeros(ids.shape), torch.zeros(ids.shape)

    forward_tokens(policy, mb)
    ((cu, longest),) = seen
    assert cu.tolist() == [0, 3, 5] and longest == 3


def test_auto_is_sdpa_without_cuda_and_varlen_refused_with_reason():
    cpu = torch.device("cpu")
    assert attention.resolve_attn("auto", cpu) == "sdpa"
    assert attention.resolve_attn("flex_attention", cpu) == "flex_attention"
    with pytest.raises(ValueError, match="attn_implementation = 'prl_varlen' needs CUDA"):
        attention.resolve_attn("prl_varlen", cpu)


def _per_document_varlen(calls):
    """A stand-in with the signature of torch 2.11's varlen_attn (no GQA, window_size)."""

    def varlen_attn(
        query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
    ):
        assert query.shape[1] == key.shape[1], "kv heads must be repeated for this signature"
        assert window_size == (-1, 0)
        calls.append((cu_seq_q.tolist(), max_q))
        out = torch.empty_like(query)
        for a, b in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist(), strict=False):
            assert b - a <= max_q
            q, k, v = (x[a:b].transpose(0, 1) for x in (query, key, value))
            out[a:b] = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).transpose(0, 1)
        return out

    return varlen_attn


def test_varlen_path_matches_sdpa_on_packed_rows(tiny_model, monkeypatch):
    calls = []
    monkeypatch.setattr(attention, "_varlen", lambda: _per_document_varlen(calls))
    monkeypatch.setattr(attention, "varlen_available", lambda device: True)
    monkeypatch.setattr(attention, "_PARAMS", set())
    cpu = Dist(0, 1, 0, torch.device("cpu"))
    ref = parallelize(load_hf_model(str(tiny_model), torch.float32, "sdpa"), cpu, activation_checkpointing=False)
    hf = load_hf_model(str(tiny_model), torch.float32, "prl_varlen")
    hf.load_state_dict(ref.hf.state_dict())
    policy = parallelize(hf, cpu, activation_checkpointing=False)
    torch.manual_seed(2)
    ids = torch.randint(0, 256, (1, 20))
    pos = torch.cat([torch.arange(11), torch.arange(6), torch.arange(3)]).unsqueeze(0)
    got, _ = policy(ids, pos, ids)
    want, _ = ref(ids, pos, ids)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    layers = hf.config.num_hidden_layers
    # Bounds are computed once per forward and reach every layer's attention call.
    assert calls == [([0, 11, 17, 20], 11)] * layers
