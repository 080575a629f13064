"""Config-time checks for sampling replay and routing replay (``prl rl``).

A loss that reads the sampling-mask logprobs (IPO's ``score_centering``) needs, for every
rl token, the ids the sampler kept and their logprobs. Those exist only when the inference
backend returns them (``InferenceBackendConfig.returns_sampling_masks``) and the train
sampling truncates (``top_p < 1`` or ``top_k`` set): score centering is defined over the
sampling mask and requires truncated sampling (``docs/offload-and-replay.md``). A config
that cannot deliver the masks is refused here, naming the fields, instead of failing at
the trainer's first step.

Routing replay (an MoE trainer routing with the experts the sampler chose,
``docs/moe.md``) likewise needs a backend that returns them; see
:func:`check_routing_replay`.
"""

from __future__ import annotations

from typing import Any

from prl.config.errors import ConfigError


def check_sampling_replay(cfg: Any) -> None:
    """Raise ConfigError when ``cfg`` (an RLConfig) asks its loss for sampling masks that
    the run cannot produce."""
    field = cfg.trainer.loss.sampling_mask_field()
    if field is None:
        return
    what = f"trainer.loss.{field} = true needs sampling masks"
    off = f"or set trainer.loss.{field} = false"
    _managed_backend_returns(cfg, "returns_sampling_masks", what, "", off)
    train = cfg.orchestrator.train
    for where, sampling in _policy_sampling(train):
        if sampling["top_p"] >= 1.0 and sampling["top_k"] is None:
            raise ConfigError(
                f"{what} from truncated sampling, but {where} has top_p = 1 and no top_k: "
                f"set top_p < 1 or top_k there {off}"
            )


def _policy_sampling(train: Any) -> list[tuple[str, dict]]:
    """(where its sampling is set, resolved sampling fields) of every train source whose
    rollouts the policy samples (a frozen sampling source trains no rl tokens)."""
    group = train.sampling.model_dump()
    if not train.source:
        return [("orchestrator.train.sampling", group)]
    out = []
    for source in train.source:
        algo = source.algo if source.algo is not None else train.algo
        if algo.build().sampling_source() != "policy":
            continue
        own = {k: v for k, v in source.sampling.model_dump().items() if v is not None}
        overrides = own.keys() & {"top_p", "top_k"}
        where = f"source '{source.name}' sampling" if overrides else "orchestrator.train.sampling"
        out.append((where, {**group, **own}))
    return out


def check_routing_replay(cfg: Any) -> None:
    """Routing replay (``trainer.model`` asks for it, :meth:`TrainerModelConfig.replays_routing`)
    needs the experts the sampler routed each token to: only a managed ``[inference]``
    backend that can return them (``InferenceBackendConfig.returns_routed_experts``)
    guarantees them, and it is told to (its ``return_routed_experts``). Anything else is
    refused as one line naming the fields."""
    if not cfg.trainer.model.replays_routing():
        return
    what = "trainer.model.routing_replay = true needs the experts inference routed each sampled token to"
    off = "or set trainer.model.routing_replay = false"
    _managed_backend_returns(cfg, "returns_routed_experts", what, " (routed_experts)", off)
    cfg.inference.backend.return_routed_experts = True


def _managed_backend_returns(cfg: Any, flag: str, what: str, field: str, off: str) -> None:
    """Refuse, in one line, a run whose inference cannot be relied on to return what ``what``
    needs: an external server (``inference`` none: its backend is unknown here, and a vLLM one
    would leave the trainer stuck at step 1; starting the parts by hand remains for an
    external torch server), or a backend whose class does not declare ``flag``."""
    if cfg.inference is None:
        raise ConfigError(
            f"{what}, which only a managed [inference] backend that returns them guarantees "
            f"(inference is none: an external server): use [inference] with backend type 'torch' {off}"
        )
    backend = cfg.inference.backend
    if not getattr(type(backend), flag, False):
        raise ConfigError(
            f"{what}{field}, which inference.backend.type '{backend.type}' does not return: "
            f"use inference.backend.type = 'torch' {off}"
        )
