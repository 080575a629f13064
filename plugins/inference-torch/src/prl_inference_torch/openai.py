"""Response bodies of the OpenAI-style routes, built from finished or running completions.

Text is the detokenised completion with special tokens skipped; a matched stop string is
cut off (as OpenAI does) while ``token_ids`` keeps every sampled token, the one that
completed the stop string and an EOS included, because training needs exactly the tokens
that were sampled. Logprobs follow OpenAI's two shapes: chat's ``logprobs.content`` list
and completions' ``tokens`` / ``token_logprobs`` / ``top_logprobs`` / ``text_offset``.
"""

from __future__ import annotations

import json
from typing import Any

from prl_inference_torch.engine import Completion, Request

REPLACEMENT = "\ufffd"


def completion_text(tokenizer: Any, comp: Completion, skip_special: bool = True) -> str:
    text = tokenizer.decode(comp.token_ids, skip_special_tokens=skip_special)
    if comp.finish_reason == "stop" and isinstance(comp.stop_reason, str):
        cut = text.find(comp.stop_reason)
        if cut >= 0:
            text = text[:cut]
    return text


def stream_safe_text(tokenizer: Any, comp: Completion, stops: list[str], skip_special: bool) -> str:
    """Text that can be sent now: hold back a partial UTF-8 character or stop-string prefix."""
    text = completion_text(tokenizer, comp, skip_special)
    if comp.finish_reason:
        return text
    text = text.rstrip(REPLACEMENT)
    hold = max((len(s) for s in stops), default=1) - 1
    return text[: len(text) - hold] if hold else text


def _piece(tokenizer: Any, token_id: int) -> str:
    return tokenizer.decode([token_id])


def chat_logprobs(tokenizer: Any, comp: Completion, start: int = 0, end: int | None = None) -> dict[str, Any]:
    content = []
    for i in range(start, len(comp.token_ids) if end is None else end):
        tok = _piece(tokenizer, comp.token_ids[i])
        tops = comp.top[i] if i < len(comp.top) else []
        content.append(
            {
                "token": tok,
                "logprob": comp.logprobs[i],
                "bytes": list(tok.encode("utf-8")),
                "top_logprobs": [
                    {"token": (t := _piece(tokenizer, tid)), "logprob": lp, "bytes": list(t.encode("utf-8"))}
                    for tid, lp in tops
                ],
            }
        )
    return {"content": content}


def completion_logprobs(tokenizer: Any, comp: Completion, start: int = 0, offset: int = 0) -> dict[str, Any]:
    tokens, offsets, tops = [], [], []
    for i in range(start, len(comp.token_ids)):
        tok = _piece(tokenizer, comp.token_ids[i])
        offsets.append(offset)
        offset += len(tok)
        tokens.append(tok)
        alts = comp.top[i] if i < len(comp.top) else []
        tops.append({_piece(tokenizer, tid): lp for tid, lp in alts} if alts else None)
    return {"tokens": tokens, "token_logprobs": comp.logprobs[start:], "top_logprobs": tops, "text_offset": offsets}


def weight_versions(comp: Completion) -> list[dict[str, Any]]:
    return [{"version": str(v), "start": s, "end": e} for v, s, e in comp.versions]


def usage(requests: list[Request]) -> dict[str, int]:
    prompt = sum(len(r.prompt_ids) for r in requests)
    out = sum(len(c.token_ids) for r in requests for c in r.completions)
    return {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}


def generate_body(req: Request, request_id: str, model: str) -> dict[str, Any]:
    """The token-in/token-out response (vLLM's ``/inference/v1/generate`` token mode)."""
    choices = []
    for comp in req.completions:
        logprobs = None
        if req.params.logprobs is not None:
            logprobs = {
                "content": [
                    # "token" in vLLM's "token_id:<id>" form: verifiers' train client parses it.
                    {
                        "token": f"token_id:{t}",
                        "token_id": t,
                        "logprob": lp,
                        "rank": rk,
                        "top_logprobs": [
                            {"token": f"token_id:{a}", "token_id": a, "logprob": b}
                            for a, b in (comp.top[i] if i < len(comp.top) else [])
                        ],
                    }
                    for i, (t, lp, rk) in enumerate(zip(comp.token_ids, comp.logprobs, comp.ranks, strict=False))
                ]
            }
        choices.append(
            {
                "index": comp.index,
                "token_ids": comp.token_ids,
                "logprobs": logprobs,
                "finish_reason": comp.finish_reason,
                "stop_reason": comp.stop_reason,
                "weight_versions": weight_versions(comp),
                "sampling_mask": comp.sampling_mask or None,
                "sampling_mask_logprobs": comp.sampling_mask_logprobs or None,
                "routed_experts": comp.routed_experts or None,
            }
        )
    prompt_lp = None
    if req.prompt_logprobs is not None:
        prompt_lp = [
            None
            if entry is None
            else {str(t): {"logprob": lp, "rank": rk, "decoded_token": None} for t, (lp, rk) in entry.items()}
            for entry in req.prompt_logprobs
        ]
    return {
        "request_id": request_id,
        "model": model,
        "version": req.version,
        "prompt_token_ids": req.prompt_ids,
        "prompt_logprobs": prompt_lp,
        "choices": choices,
        "usage": usage([req]),
    }


def sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n"
