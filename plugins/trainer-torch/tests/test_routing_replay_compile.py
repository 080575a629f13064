"""Routing replay inside compiled, activation-checkpointed MoE decoder layers (as on every
GPU): the replay hook is opaque to torch.compile like the routing metrics' hook (see
test_moe_compile.py for why), the layers train, and the experts used, the ones the routing
metrics count after the replay hook, are the recorded ones, in the forward and in the
backward's recomputation alike (a recomputation that routed otherwise would fail the
backward)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory) -> Path:
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", "tiny-moe", seed=0)


@pytest.fixture
def few_recompiles():
    # dynamo's own patch puts the setting back; monkeypatch's undo left the config module
    # without the key, so the next test patching it in the same process failed
    with torch._dynamo.config.patch(recompile_limit=2):
        yield


def test_compiled_layers_route_with_the_recorded_experts(monkeypatch, tiny_moe, few_recompiles):
    from prl_trainer_torch import logprobs
    from prl_trainer_torch.model import Dist, load_hf_model, parallelize
    from prl_trainer_torch.moe import RoutingStats, routers
    from prl_trainer_torch.routing_replay import RouteReplay, replay_routes

    for name, kernel in list(logprobs._KERNELS.items()):
        monkeypatch.setitem(logprobs._KERNELS, name, kernel)
    torch._dynamo.reset()
    torch.manual_seed(0)
    hf = load_hf_model(str(tiny_moe), torch.bfloat16, "sdpa")
    policy = parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=True, compile=True)
    policy.routing = RoutingStats.of(hf, torch.device("cpu"))
    policy.route_replay = RouteReplay.of(hf, "tiny-moe")
    policy.train()
    lengths, replayed = [100, 120, 64], 0
    for n in lengths:
        pos = torch.arange(n).unsqueeze(0)
        ids = torch.randint(0, hf.config.vocab_size, pos.shape)
        # the second half of the positions is replayed onto experts 6 and 7 in every layer
        present = torch.arange(n) >= n // 2
        replay_routes(policy, (torch.tensor([6, 7] * 4).repeat(n, 1), present))
        replayed += int(present.sum())
        logp, _ = policy(ids, pos, ids)
        logp.float().sum().backward()
        assert torch.isfinite(logp).all()
    replay_routes(policy, None)
    assert all(r.weight.grad is not None and torch.isfinite(r.weight.grad).all() for r in routers(hf))
    loads = policy.routing.stats[:, :8]
    # every replayed token went to experts 6 and 7 in every layer, each counted once
    assert (loads[:, 6] >= replayed).all() and (loads[:, 7] >= replayed).all()
    assert policy.routing.stats[:, -1].tolist() == [float(sum(lengths))] * 4
    torch._dynamo.reset()
