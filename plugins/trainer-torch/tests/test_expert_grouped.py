"""The grouped-GEMM path of the expert-parallel experts (``expert_mlp``) computes what the
loop over experts computes, forward and backward, empty experts included."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from prl_trainer_torch import expert_parallel


def _run(mode: str, x, counts, gate_up, down):
    x, gate_up, down = (t.detach().clone().requires_grad_(True) for t in (x, gate_up, down))
    previous, expert_parallel.GROUPED_GEMM = expert_parallel.GROUPED_GEMM, mode
    try:
        out = expert_parallel.expert_mlp(x, counts, gate_up, down, F.silu)
    finally:
        expert_parallel.GROUPED_GEMM = previous
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return out, x.grad, gate_up.grad, down.grad


@pytest.mark.parametrize("counts", [[3, 0, 5, 1], [0, 0, 9, 0], [2, 2, 2, 2]])
def test_grouped_gemm_equals_the_expert_loop(counts):
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no grouped GEMM")
    g = torch.Generator().manual_seed(0)
    experts, hidden, inter = len(counts), 16, 8
    x = torch.randn(sum(counts), hidden, generator=g)
    gate_up = torch.randn(experts, 2 * inter, hidden, generator=g) / 4
    down = torch.randn(experts, hidden, inter, generator=g) / 4
    loop = _run("loop", x, counts, gate_up, down)
    grouped = _run("grouped", x, counts, gate_up, down)
    for name, a, b in zip(("output", "x grad", "gate_up grad", "down grad"), loop, grouped, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
    # an expert with no rows gets a zero gradient, not garbage
    for e, n in enumerate(counts):
        if n == 0:
            assert not grouped[2][e].any() and not grouped[3][e].any()


def test_auto_uses_the_loop_on_the_cpu():
    x = torch.randn(4, 16)
    assert expert_parallel.GROUPED_GEMM == "auto"
    assert not expert_parallel._grouped(x)
    assert not expert_parallel._grouped(x[:0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_auto_runs_the_grouped_gemm_and_matches_the_loop():
    g = torch.Generator().manual_seed(1)
    counts, hidden, inter = [40, 0, 24, 64, 8, 0, 16, 104], 128, 64  # bf16 grouped GEMM: 16-byte rows
    x = torch.randn(sum(counts), hidden, generator=g).cuda().bfloat16()
    gate_up = (torch.randn(len(counts), 2 * inter, hidden, generator=g) / 8).cuda().bfloat16()
    down = (torch.randn(len(counts), hidden, inter, generator=g) / 8).cuda().bfloat16()
    assert expert_parallel._grouped(x)
    loop = _run("loop", x, counts, gate_up, down)
    auto = _run("auto", x, counts, gate_up, down)
    for name, a, b in zip(("output", "x grad", "gate_up grad", "down grad"), loop, auto, strict=True):
        torch.testing.assert_close(b.float(), a.float(), rtol=2e-2, atol=2e-2, msg=lambda m, name=name: f"{name}: {m}")
