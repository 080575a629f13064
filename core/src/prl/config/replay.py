"""Config-time checks for sampling replay (``prl rl``).

A loss that reads the sampling-mask logprobs (IPO's ``score_centering``) needs, for every
rl token, the ids the sampler kept and their logprobs. Those exist only when the inference
backend returns them (``InferenceBackendConfig.returns_sampling_masks``) and the train
sampling truncates (``top_p < 1`` or ``top_k`` set): score centering is defined over the
sampling mask and requires truncated sampling (``docs/offload-and-replay.md``). A config
that cannot deliver the masks is refused here, naming the fields, instead of failing at
the trainer's first step.
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
    if cfg.inference is None:
        # An external server's backend is unknown here; a vLLM one returns no masks and the
        # trainer would stop at step 1. The manual layout (prl trainer / orchestrator /
        # inference started by hand) remains for an external torch server.
        raise ConfigError(
            f"{what}, which only a managed [inference] backend that returns them guarantees "
            f"(inference is none: an external server): use [inference] with backend type 'torch' {off}"
        )
    backend = cfg.inference.backend
    if not getattr(type(backend), "returns_sampling_masks", False):
        raise ConfigError(
            f"{what}, which inference.backend.type '{backend.type}' does not return: "
            f"use inference.backend.type = 'torch' {off}"
        )
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
