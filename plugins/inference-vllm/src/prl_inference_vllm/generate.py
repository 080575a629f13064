"""Token-in/token-out generation on a vLLM engine (``POST /inference/v1/generate``).

The request follows vLLM's token mode: ``{"token_ids": [...], "sampling_params": {...},
"model": <base or adapter name>}``. The reply carries, per completion, the sampled
``token_ids``, their ``logprobs.content[i] = {token_id, logprob, rank, top_logprobs}``,
``finish_reason`` ("stop" | "length" | "abort") and ``weight_versions`` (which output tokens
each policy version sampled, so a weight update mid-sequence is visible), plus the request's
``version`` (the policy that sampled its first token) and, with ``prompt_logprobs``, one
``{token_id: {logprob, rank}}`` entry per prompt token (``None`` for the first).
``max_tokens 1`` with ``prompt_logprobs 1`` is prefill scoring: the logprob of every prompt
token under the current policy.

The sampled token's logprob is always computed (vLLM's ``logprobs=0``), because training
needs it; ``sampling_params.logprobs = k`` adds the top-k alternatives.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import Field

from prl.contracts.http import ApiError, OpenModel, SamplingFields


class GenerateSampling(SamplingFields):
    min_p: float | None = None
    min_tokens: int = 0
    logprobs: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


class GenerateRequest(OpenModel):
    token_ids: list[int] = Field(min_length=1)
    sampling_params: GenerateSampling = Field(default_factory=GenerateSampling)
    model: str | None = None
    stream: bool = False
    request_id: str | None = None
    # the torch backend's image input (docs/vlm.md); refused here rather than ignored
    images: list[str] | None = None


def sampling_params(sp: GenerateSampling, prompt_len: int, max_model_len: int, max_logprobs: int):
    """vLLM ``SamplingParams`` for a request, with range errors as 400s naming the field."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    if prompt_len >= max_model_len:
        raise ApiError(f"token_ids has {prompt_len} tokens; the context (max_model_len) is {max_model_len}")
    room = max_model_len - prompt_len
    if sp.max_tokens is not None and sp.max_tokens < 1:
        raise ApiError(f"sampling_params.max_tokens must be >= 1, got {sp.max_tokens}")
    if sp.max_tokens is not None and sp.max_tokens > room:
        raise ApiError(
            f"sampling_params.max_tokens ({sp.max_tokens}) + prompt ({prompt_len} tokens) exceeds the "
            f"context (max_model_len {max_model_len})"
        )
    for name in ("logprobs", "prompt_logprobs"):
        value = getattr(sp, name)
        if value is not None and not 0 <= value <= max_logprobs:
            raise ApiError(f"sampling_params.{name} must be between 0 and {max_logprobs}, got {value}")
    stop = [sp.stop] if isinstance(sp.stop, str) else [s for s in (sp.stop or []) if s]
    kwargs: dict[str, Any] = dict(
        n=sp.n,
        temperature=1.0 if sp.temperature is None else sp.temperature,
        top_p=1.0 if sp.top_p is None else sp.top_p,
        top_k=0 if sp.top_k in (None, -1) else sp.top_k,
        max_tokens=sp.max_tokens or room,
        min_tokens=sp.min_tokens,
        stop=stop or None,
        stop_token_ids=sp.stop_token_ids,
        seed=sp.seed,
        ignore_eos=sp.ignore_eos,
        logprobs=sp.logprobs or 0,
        prompt_logprobs=sp.prompt_logprobs,
        # Text is only needed to match stop strings; token ids are the answer.
        detokenize=bool(stop),
        skip_special_tokens=False,
        # One reply per request: no per-step outputs to build and throw away.
        output_kind=RequestOutputKind.FINAL_ONLY,
    )
    for name in ("min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
        if getattr(sp, name) is not None:
            kwargs[name] = getattr(sp, name)
    try:
        return SamplingParams(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ApiError(f"invalid sampling_params: {exc}") from None


def new_request_id(given: str | None) -> str:
    # vLLM keys running requests by id; a client-chosen id must not collide with another's.
    return f"gen-{given or ''}-{uuid.uuid4().hex}" if given else f"gen-{uuid.uuid4().hex}"


def _logprob_entries(comp: Any, top: int) -> list[dict[str, Any]]:
    out = []
    for i, tok in enumerate(comp.token_ids):
        entry = comp.logprobs[i] if comp.logprobs is not None and i < len(comp.logprobs) else {}
        chosen = entry.get(tok)
        alts = sorted(
            ((tid, lp) for tid, lp in entry.items() if lp.rank is not None and lp.rank <= top),
            key=lambda kv: kv[1].rank,
        )
        out.append(
            {
                "token_id": tok,
                "logprob": None if chosen is None else float(chosen.logprob),
                "rank": None if chosen is None else chosen.rank,
                "top_logprobs": [{"token_id": tid, "logprob": float(lp.logprob)} for tid, lp in alts],
            }
        )
    return out


def _versions(comp: Any) -> list[dict[str, Any]]:
    spans = getattr(comp, "weight_versions", None) or []
    return [{"version": str(s.version), "start": s.start, "end": s.end} for s in spans]


def _prompt_logprobs(out: Any) -> list[Any] | None:
    if out.prompt_logprobs is None:
        return None
    return [
        None
        if entry is None
        else {
            str(tid): {"logprob": float(lp.logprob), "rank": lp.rank, "decoded_token": None}
            for tid, lp in entry.items()
        }
        for entry in out.prompt_logprobs
    ]


def generate_body(out: Any, request_id: str, model: str, top: int, version: int) -> dict[str, Any]:
    """The JSON reply for a finished vLLM ``RequestOutput``."""
    choices = []
    for comp in out.outputs:
        versions = _versions(comp)
        choices.append(
            {
                "index": comp.index,
                "token_ids": list(comp.token_ids),
                "logprobs": {"content": _logprob_entries(comp, top)},
                "finish_reason": comp.finish_reason or "abort",
                "stop_reason": comp.stop_reason,
                "weight_versions": versions,
            }
        )
    first = [int(c["weight_versions"][0]["version"]) for c in choices if c["weight_versions"]]
    prompt_ids = list(out.prompt_token_ids or [])
    completion_tokens = sum(len(c["token_ids"]) for c in choices)
    return {
        "request_id": request_id,
        "model": model,
        "version": min(first) if first else version,
        "prompt_token_ids": prompt_ids,
        "prompt_logprobs": _prompt_logprobs(out),
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        },
    }
