"""Routing replay on routers other than Qwen3-MoE's: the replayed weights are the recorded
experts' softmax probabilities (renormalised when the router says ``norm_topk_prob``); a
router that weighs its experts otherwise, or does not return (logits, weights, indices), is
refused in one line rather than replayed with weights it would never use."""

from __future__ import annotations

import pytest
import torch
from prl_trainer_torch.routing_replay import RouteReplay
from torch import nn

from prl.config.errors import ConfigError


class Router(nn.Module):
    top_k = 2

    def __init__(self, norm: bool, scale: float = 1.0, outputs: int = 3) -> None:
        super().__init__()
        self.norm_topk_prob, self.scale, self.outputs = norm, scale, outputs
        self.weight = nn.Parameter(torch.randn(4, 3, generator=torch.Generator().manual_seed(0)))

    def forward(self, x: torch.Tensor):
        logits = x @ self.weight.T
        top, idx = logits.softmax(-1).topk(2, -1)
        if self.norm_topk_prob:
            top = top / top.sum(-1, keepdim=True)
        out = (logits, top * self.scale, idx)
        return out[: self.outputs]


def _replay(router: Router, ids: list[list[int]], present: list[bool]) -> tuple:
    replay = RouteReplay([router])
    replay.set((torch.tensor(ids), torch.tensor(present)))
    return router(torch.randn(len(ids), 3, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("norm", [True, False])
def test_replayed_weights_are_the_recorded_experts_probabilities(norm):
    router = Router(norm)
    logits, weights, idx = _replay(router, [[3, 1], [0, 2]], [True, False])
    assert idx[0].tolist() == [3, 1]
    probs = logits.softmax(-1)[0, [3, 1]]
    want = probs / probs.sum() if norm else probs
    torch.testing.assert_close(weights[0], want)
    own = logits.softmax(-1)[1].topk(2)
    assert idx[1].tolist() == own.indices.tolist()  # no record: the router's own choice


def test_a_router_weighing_otherwise_is_refused():
    with pytest.raises(ConfigError, match="model.routing_replay: router Router weighs its experts other than"):
        _replay(Router(True, scale=0.5), [[3, 1]], [True])


def test_a_router_without_indices_is_refused():
    with pytest.raises(ConfigError, match=r"does not return \(logits, weights, indices\)"):
        _replay(Router(True, outputs=2), [[3, 1]], [True])
