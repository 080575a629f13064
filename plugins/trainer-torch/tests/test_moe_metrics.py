"""MoE routing metrics (prl_trainer_torch.moe): known loads give known values, the router
hooks count each token's chosen experts and probability mass once, without a host read, and
only in training forward passes (not validation, not a checkpointed layer's recomputation)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from prl_trainer_torch.model import Dist, load_hf_model, parallelize
from prl_trainer_torch.moe import METRICS, RoutingStats, layer_metrics, routers, routing_metrics
from torch import nn


@pytest.fixture(scope="session")
def tiny_moe_model(tmp_path_factory) -> Path:
    """The tiny-moe preset: Qwen3-MoE, 4 layers of 8 experts, top-2 (a fixture here, not in
    conftest.py, whose every edit re-measures the modules its tests guard under mutation)."""
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", "tiny-moe", seed=0)


def _row(loads: list[float], mass: float, tokens: float) -> list[float]:
    return [*loads, mass, tokens]


def test_known_loads_give_known_metrics():
    # layer 0: perfectly balanced; layer 1: loads 10, 2, 4, 0 (mean 4, population std sqrt(14))
    stats = [_row([4, 4, 4, 4], 6.0, 8), _row([10, 2, 4, 0], 4.0, 8)]
    m = routing_metrics(stats, experts=4)
    assert list(m) == list(METRICS)
    cv1 = math.sqrt(14) / 4
    expected = {
        "max_vio/mean": (0 + 1.5) / 2,
        "max_vio/max": 1.5,
        "routing_confidence/mean": (6 / 8 + 4 / 8) / 2,
        "expert_load/cv/mean": cv1 / 2,
        "expert_load/cv/max": cv1,
        "expert_load/max_mean/mean": (1 + 2.5) / 2,
        "expert_load/max_mean/max": 2.5,
        "expert_load/cold_frac/mean": (0 + 0.25) / 2,
        "expert_load/cold_frac/max": 0.25,
    }
    assert m == pytest.approx(expected)


def test_collapse_onto_one_expert_pair_reads_as_such():
    # 8 experts, top-2, every token on experts 0 and 1: the worst a top-2 router can do
    m = layer_metrics([100, 100, 0, 0, 0, 0, 0, 0])
    assert m["max_vio"] == pytest.approx(3.0) and m["expert_load/max_mean"] == pytest.approx(4.0)
    assert m["expert_load/cold_frac"] == 0.75 and m["expert_load/cv"] == pytest.approx(math.sqrt(3))


def test_layers_without_tokens_are_left_out():
    assert routing_metrics([_row([0, 0], 0.0, 0)], experts=2) == {}
    m = routing_metrics([_row([0, 0], 0.0, 0), _row([3, 1], 1.5, 2)], experts=2)
    assert m["max_vio/max"] == pytest.approx(0.5) and m["routing_confidence/mean"] == pytest.approx(0.75)


class FakeRouter(nn.Module):
    """Returns given (logits, weights, indices) whatever its input, as transformers' top-k
    routers do."""

    num_experts = 4

    def __init__(self, logits: torch.Tensor, k: int) -> None:
        super().__init__()
        self.logits, self.k = logits, k

    def forward(self, hidden: torch.Tensor):
        weights, chosen = torch.topk(self.logits.softmax(-1), self.k, dim=-1)
        return self.logits, weights, chosen


def test_hooks_count_chosen_experts_and_probability_mass():
    # three tokens, top-2: experts {0, 1}, {0, 2}, {0, 1}
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.1, 0.1], [0.6, 0.1, 0.2, 0.1], [0.4, 0.4, 0.1, 0.1]]))
    router = FakeRouter(logits, k=2)
    stats = RoutingStats([router], torch.device("cpu"))
    router(None)  # not recording: counts nothing
    stats.recording = True
    router(None)
    router(None)
    assert stats.stats[0].tolist() == pytest.approx([6, 4, 2, 0, 2 * (0.8 + 0.8 + 0.8), 6])
    m = stats.step_metrics()
    # loads 6, 4, 2, 0: mean 3
    assert m["max_vio/mean"] == pytest.approx(1.0) and m["expert_load/cold_frac/max"] == 0.25
    assert m["routing_confidence/mean"] == pytest.approx(0.8)
    assert stats.stats.abs().sum() == 0  # read once, then the next step starts from zero
    stats.close()
    router(None)
    assert stats.stats.abs().sum() == 0


def test_routers_are_found_in_moe_models_only(tiny_model, tiny_moe_model):
    assert routers(load_hf_model(str(tiny_model), torch.float32, "sdpa")) == []
    moe = load_hf_model(str(tiny_moe_model), torch.float32, "sdpa")
    found = routers(moe)
    assert len(found) == 4 and all(m is layer.mlp.gate for m, layer in zip(found, moe.model.layers, strict=True))


def test_model_flops_count_only_the_experts_a_token_uses(tiny_model, tiny_moe_model):
    """perf/mfu's parameter count: 2 of 8 experts per layer, not all 8 (an MoE run would
    otherwise report about 3x its real MFU on tiny-moe, 10x on Qwen3-30B-A3B)."""
    from prl_model_init import active_parameters, count_parameters
    from prl_trainer_torch.model import count_params

    moe = load_hf_model(str(tiny_moe_model), torch.float32, "sdpa")
    assert count_params(moe) == (count_parameters("tiny-moe"), active_parameters("tiny-moe"))
    dense = load_hf_model(str(tiny_model), torch.float32, "sdpa")
    assert count_params(dense) == (count_parameters("tiny"), count_parameters("tiny"))


def test_checkpointed_layers_and_eval_passes_count_nothing_twice(tiny_moe_model):
    """With activation checkpointing the routers run again in the backward pass; the
    counts must still be one per token and layer (the tokens column equals the row's)."""
    hf = load_hf_model(str(tiny_moe_model), torch.float32, "sdpa")
    policy = parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=True, compile=False)
    policy.routing = RoutingStats(routers(hf), torch.device("cpu"))
    calls = [0]
    routers(hf)[0].register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    torch.manual_seed(0)
    ids = torch.randint(0, 256, (1, 12))
    pos = torch.cat([torch.arange(7), torch.arange(5)])[None]
    policy.train()
    logp, _ = policy(ids, pos, torch.roll(ids, -1))
    logp.sum().backward()
    assert calls[0] == 2  # forward, then the recomputation in the backward
    stats = policy.routing.stats
    assert stats[:, -1].tolist() == [12.0] * 4  # tokens per layer
    assert stats[:, :8].sum(1).tolist() == [24.0] * 4  # two experts per token
    policy.eval()
    with torch.no_grad():
        policy(ids, pos, torch.roll(ids, -1))
    assert stats[:, -1].tolist() == [12.0] * 4
    m = policy.routing.step_metrics()
    assert set(m) == set(METRICS) and all(math.isfinite(v) for v in m.values())
    assert 2 / 8 <= m["routing_confidence/mean"] <= 1.0
