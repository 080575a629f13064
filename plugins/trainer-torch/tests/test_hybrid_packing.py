"""Packed rows through a Qwen3.5 hybrid model (Gated DeltaNet + full attention): every
document of a packed row gets the logprobs (and gradients) it gets when run alone, which
transformers' own forward does not give (its linear-attention state runs across documents).

Tolerance: the packed and per-document forwards run the same float32 kernels on different
batch shapes, so they agree to float32 rounding; 1e-5 on logprobs is ~1000x tighter than the
leak (> 1e-2 on the random tiny model)."""

from __future__ import annotations

import sys

import pytest
import torch
from prl_trainer_torch import hybrid
from prl_trainer_torch.attention import host_document_bounds
from prl_trainer_torch.model import Dist, PolicyModel, load_hf_model, parallelize

from prl.config.errors import ConfigError

LENGTHS = (37, 80, 21)  # the 80-token document spans two of the delta rule's 64-token chunks
ATOL = 1e-5


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory):
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-qwen3.5", "tiny-qwen3.5", seed=0)


def _packed(lengths, seed=0):
    gen = torch.Generator().manual_seed(seed)
    docs = [torch.randint(0, 256, (n,), generator=gen) for n in lengths]
    ids = torch.cat(docs).unsqueeze(0)
    pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    return docs, ids, pos


def _targets(ids):
    return torch.roll(ids, -1, dims=-1)


def _alone(policy, docs):
    """Each document through the policy on its own, logprobs concatenated in row order."""
    outs = []
    for d in docs:
        ids = d.unsqueeze(0)
        logp, _ = policy(ids, torch.arange(d.numel()).unsqueeze(0), _targets(ids))
        outs.append(logp)
    return torch.cat(outs, dim=-1)


def _stock_logprobs(hf, ids, pos):
    """transformers' forward of the packed row, no prl hook: the leaking reference."""
    logits = hf(input_ids=ids, position_ids=pos, use_cache=False).logits.float()
    return torch.log_softmax(logits, -1).gather(-1, _targets(ids).unsqueeze(-1)).squeeze(-1)


def _per_doc(x, lengths):
    return torch.split(x.squeeze(0), list(lengths))


def test_packed_forward_equals_each_document_alone_and_the_stock_forward_leaks(hybrid_model):
    stock = load_hf_model(str(hybrid_model), torch.float32, "sdpa").eval()
    hf = load_hf_model(str(hybrid_model), torch.float32, "sdpa").eval()
    docs, ids, pos = _packed(LENGTHS)
    with torch.no_grad():
        leaky = _stock_logprobs(stock, ids, pos)
        policy = PolicyModel(hf)
        assert policy.hybrid
        packed, _ = policy(ids, pos, _targets(ids))
        alone = _alone(policy, docs)
    # The targets at each document's last token point into the next document; compare the
    # rest, which is what training reads.
    for i, (got, want, old) in enumerate(
        zip(_per_doc(packed, LENGTHS), _per_doc(alone, LENGTHS), _per_doc(leaky, LENGTHS), strict=True)
    ):
        torch.testing.assert_close(got[:-1], want[:-1], atol=ATOL, rtol=0)
        leak = (old[:-1] - want[:-1]).abs().max().item()
        if i == 0:
            assert leak < ATOL  # nothing precedes the first document
        else:
            assert leak > 1e-2, f"document {i}: the unfixed forward should leak state, differs by {leak}"


def test_rows_of_a_micro_batch_and_host_bounds(hybrid_model):
    """Two packed rows in one [2, T] micro-batch, bounds given as the trainer builds them."""
    policy = PolicyModel(load_hf_model(str(hybrid_model), torch.float32, "sdpa").eval())
    first, ids0, pos0 = _packed((30, 50, 20), seed=1)
    second, ids1, pos1 = _packed((64, 36), seed=2)
    ids, pos = torch.cat([ids0, ids1]), torch.cat([pos0, pos1])
    with torch.no_grad():
        got, _ = policy(ids, pos, _targets(ids), bounds=host_document_bounds(pos, torch.device("cpu")))
        computed, _ = policy(ids, pos, _targets(ids))
        want0, want1 = _alone(policy, first), _alone(policy, second)
    torch.testing.assert_close(got, computed, atol=0, rtol=0)
    for row, want, lengths in ((0, want0, (30, 50, 20)), (1, want1, (64, 36))):
        for g, w in zip(_per_doc(got[row], lengths), _per_doc(want, lengths), strict=True):
            torch.testing.assert_close(g[:-1], w[:-1], atol=ATOL, rtol=0)


def test_packed_gradients_equal_the_sum_over_documents(hybrid_model):
    """Training reads gradients, not only values: the packed backward through the
    scatter into documents gives each parameter the per-document sum."""
    hf = load_hf_model(str(hybrid_model), torch.float32, "sdpa")
    policy = parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=True)
    docs, ids, pos = _packed(LENGTHS, seed=3)
    mask = torch.ones_like(ids, dtype=torch.float32)
    mask[0, torch.tensor(LENGTHS).cumsum(0) - 1] = 0  # targets that cross into the next document

    logp, _ = policy(ids, pos, _targets(ids))
    (logp * mask).sum().backward()
    packed = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    policy.zero_grad()
    for d in docs:
        one = d.unsqueeze(0)
        logp, _ = policy(one, torch.arange(d.numel()).unsqueeze(0), _targets(one))
        logp[0, :-1].sum().backward()
    linear = [n for n in packed if ".linear_attn." in n]
    assert {"conv1d.weight", "A_log", "dt_bias", "in_proj_qkv.weight"} <= {n.split("linear_attn.")[1] for n in linear}
    for name, p in policy.named_parameters():
        if name in packed:
            torch.testing.assert_close(packed[name], p.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_generation_and_unpacked_calls_keep_the_stock_forward(hybrid_model):
    """Without document bounds (generate, a plain forward) the installed layers run the
    stock code: same logits, and the recurrent-cache decode still matches a full forward."""
    stock = load_hf_model(str(hybrid_model), torch.float32, "sdpa").eval()
    hf = load_hf_model(str(hybrid_model), torch.float32, "sdpa").eval()
    assert hybrid.install(hf) and hybrid.install(hf)  # idempotent
    assert len(hybrid.delta_net_modules(hf)) == 3
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.equal(hf(ids).logits, stock(ids).logits)
        gen = hf.generate(ids, max_new_tokens=8, do_sample=False, use_cache=True, pad_token_id=0)
        full = hf(gen).logits
    assert torch.equal(full[0, 39:-1].argmax(-1), gen[0, 40:])


def test_a_dense_model_is_left_alone(tiny_model):
    hf = load_hf_model(str(tiny_model), torch.float32, "sdpa")
    assert not hybrid.install(hf)
    assert not PolicyModel(hf).hybrid


def test_linear_attention_of_another_layout_is_refused_in_one_line():
    from transformers import AutoModelForCausalLM, Qwen3NextConfig

    cfg = Qwen3NextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        linear_num_key_heads=1,
        linear_num_value_heads=2,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        num_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        layer_types=["linear_attention", "full_attention"],
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    with pytest.raises(ConfigError) as err:
        PolicyModel(model)
    message = str(err.value)
    assert "\n" not in message and "qwen3_next" in message and "linear-attention" in message


def _fake_fla(calls):
    """Stand-ins for fla's varlen kernels with their calling convention (one flattened
    sequence, ``cu_seqlens`` long), computed per document with transformers' torch code, so
    the fla branch's plumbing is checked on CPU against the padded branch."""
    fns = sys.modules["transformers.models.qwen3_5.modeling_qwen3_5"]

    def spans(cu):
        return list(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True))

    def conv(x, weight, bias, activation, cu_seqlens):
        calls.append(("conv", tuple(x.shape), cu_seqlens.dtype))
        parts = [
            fns.causal_conv1d_fn(x[:, a:b].transpose(1, 2), weight, bias, activation) for a, b in spans(cu_seqlens)
        ]
        return torch.cat(parts, dim=-1).transpose(1, 2), None

    def rule(q, k, v, g, beta, use_qk_l2norm_in_kernel, cu_seqlens):
        calls.append(("rule", tuple(q.shape), cu_seqlens.dtype))
        parts = [
            fns.torch_chunk_gated_delta_rule(
                q[:, a:b], k[:, a:b], v[:, a:b], g=g[:, a:b], beta=beta[:, a:b], use_qk_l2norm_in_kernel=True
            )[0]
            for a, b in spans(cu_seqlens)
        ]
        return torch.cat(parts, dim=1), None

    return conv, rule


def test_fla_branch_flattens_rows_and_passes_cu_seqlens(hybrid_model):
    hf = load_hf_model(str(hybrid_model), torch.float32, "sdpa").eval()
    mod = hybrid.delta_net_modules(hf)[0]
    x = torch.randn(2, 50, hf.config.hidden_size, generator=torch.Generator().manual_seed(5))
    pos = torch.cat([torch.arange(30), torch.arange(20), torch.arange(45), torch.arange(5)]).view(2, 50)
    cu, longest = host_document_bounds(pos, torch.device("cpu"))
    calls = []
    with torch.no_grad():
        qkv = mod.in_proj_qkv(x)
        g = -mod.A_log.exp() * torch.nn.functional.softplus(mod.in_proj_a(x) + mod.dt_bias)
        beta = mod.in_proj_b(x).sigmoid()
        got = hybrid._mix_fla(mod, _fake_fla(calls), qkv, g, beta, cu)
        want = hybrid._mix_padded(mod, qkv, g, beta, cu, longest)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    heads = hf.config.linear_num_value_heads
    assert calls == [("conv", (1, 100, qkv.shape[-1]), torch.long), ("rule", (1, 100, heads, 32), torch.long)]
