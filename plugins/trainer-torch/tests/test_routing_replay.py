"""Routing replay (prl_trainer_torch.routing_replay): with model.routing_replay on, the
trainer's routers pick the recorded experts where a token has a record (its weights stay
the router's softmax, with their gradient), route as usual elsewhere; off, recorded routes
change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from prl_trainer_torch.model import Dist, load_hf_model, parallelize
from prl_trainer_torch.moe_layers import router_experts, routers
from prl_trainer_torch.rl_step import forward_tokens, to_micro_batch
from prl_trainer_torch.routing_replay import RouteReplay, routes_of

from prl.config.errors import ConfigError
from prl.orchestrator.packing import micro_batch
from prl.types import TrainingSample

PROMPT, TOKENS = 5, 14


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory) -> Path:
    """The tiny-moe preset: Qwen3-MoE, 4 layers of 8 experts, top-2."""
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", "tiny-moe", seed=0)


def _policy(path: Path, checkpointing: bool = False):
    hf = load_hf_model(str(path), torch.float32, "sdpa")
    return parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=checkpointing, compile=False)


def _raw(routes: list[list[int]] | None) -> dict:
    ids = torch.randint(0, 200, (TOKENS,), generator=torch.Generator().manual_seed(3)).tolist()
    n = TOKENS
    sampled = [0.0] * PROMPT + [1.0] * (n - PROMPT)
    sample = TrainingSample(
        ids, [bool(s) for s in sampled], sampled, [0.0] * n, 1.0, sampled, [0.0] * n, [0.0] * n, "e"
    )
    sample.routed_experts = routes
    return micro_batch([sample])


def _own_choice(policy, raw: dict) -> torch.Tensor:
    """[T, layers, k]: the experts each position's routers choose by themselves."""
    seen = []
    handles = [r.register_forward_hook(lambda m, a, out: seen.append(out[-1].detach())) for r in routers(policy.hf)]
    with torch.no_grad():
        forward_tokens(policy, to_micro_batch(raw, torch.device("cpu")))
    for h in handles:
        h.remove()
    return torch.stack(seen, 1)


def _recorded(choice: torch.Tensor) -> list[list[int]]:
    """As the sampler records them: token i (sampled) gets the choice at position i − 1."""
    flat = choice.reshape(choice.shape[0], -1).tolist()
    return [[] for _ in range(PROMPT)] + [flat[i - 1] for i in range(PROMPT, TOKENS)]


def _logp(policy, raw: dict) -> torch.Tensor:
    with torch.no_grad():
        return forward_tokens(policy, to_micro_batch(raw, torch.device("cpu"))).logp


def test_replaying_the_routers_own_choice_changes_nothing(tiny_moe):
    policy = _policy(tiny_moe)
    plain = _raw(None)
    own = _own_choice(policy, plain)
    base = _logp(policy, plain)
    policy.route_replay = RouteReplay.of(policy.hf, "tiny-moe")
    assert torch.allclose(_logp(policy, _raw(_recorded(own))), base, atol=1e-6)
    assert torch.equal(_logp(policy, plain), base)  # a micro-batch without routes routes as usual


def test_other_recorded_experts_are_used_where_recorded(tiny_moe):
    policy = _policy(tiny_moe)
    plain = _raw(None)
    own = _own_choice(policy, plain)
    base = _logp(policy, plain)
    forced = (own + 1) % 8  # another expert pair at every position
    raw = _raw(_recorded(forced))
    off = _logp(policy, raw)
    assert torch.equal(off, base)  # replay off: recorded routes are ignored
    policy.route_replay = RouteReplay.of(policy.hf, "tiny-moe")
    used = []
    _, _, experts = router_experts(policy.hf)[0]
    handle = experts.register_forward_hook(lambda m, args, out: used.append(args[1].detach()))
    replayed = _logp(policy, raw)
    handle.remove()
    # positions PROMPT-1 .. T-2 predict the sampled tokens: they go to the recorded experts
    assert torch.equal(used[0][PROMPT - 1 : TOKENS - 1], forced[PROMPT - 1 : TOKENS - 1, 0])
    assert torch.equal(used[0][: PROMPT - 1], own[: PROMPT - 1, 0])  # prompt positions: own choice
    # tokens predicted before the first replayed position keep their logprobs; the rest move
    assert torch.allclose(replayed[:PROMPT], base[:PROMPT], atol=1e-6)
    assert (replayed[PROMPT:] - base[PROMPT:]).abs().min() > 1e-4


def test_replayed_weights_keep_the_routers_gradient(tiny_moe):
    policy = _policy(tiny_moe, checkpointing=True)  # the backward recomputes with the same routes
    own = _own_choice(policy, _raw(None))
    policy.route_replay = RouteReplay.of(policy.hf, "tiny-moe")
    policy.train()  # checkpointing recomputes only in training
    out = forward_tokens(policy, to_micro_batch(_raw(_recorded((own + 3) % 8)), torch.device("cpu")))
    out.logp.sum().backward()
    grads = [r.weight.grad for r in routers(policy.hf)]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


def test_routes_of_aligns_and_checks():
    raw = {"input_ids": [1, 2, 3, 4], "routed_experts": [[], [], [1, 2], [3, 0]]}
    ids, present = routes_of(raw, torch.device("cpu"))
    assert present.tolist() == [False, True, True, False]
    assert ids.tolist()[1:3] == [[1, 2], [3, 0]]
    assert routes_of({"input_ids": [1]}, torch.device("cpu")) is None
    with pytest.raises(ConfigError, match="routed_experts: 1 entries for 4 tokens"):
        routes_of({"input_ids": [1, 2, 3, 4], "routed_experts": [[]]}, torch.device("cpu"))
    with pytest.raises(ConfigError, match=r"routed_experts: entries of \[2, 3\] ids"):
        routes_of({"input_ids": [1, 2], "routed_experts": [[1, 2], [1, 2, 3]]}, torch.device("cpu"))


def test_a_record_of_the_wrong_width_is_refused(tiny_moe):
    policy = _policy(tiny_moe)
    policy.route_replay = RouteReplay.of(policy.hf, "tiny-moe")
    raw = _raw([[] for _ in range(PROMPT)] + [[0, 1, 2]] * (TOKENS - PROMPT))
    with pytest.raises(ConfigError, match="routed_experts: 3 ids per token, but the model has 4 MoE layers x top_k 2"):
        _logp(policy, raw)


def test_a_dense_model_has_nothing_to_replay(tiny_model):
    hf = load_hf_model(str(tiny_model), torch.float32, "sdpa")
    with pytest.raises(ConfigError, match="model.routing_replay: tiny has no MoE router"):
        RouteReplay.of(hf, "tiny")
