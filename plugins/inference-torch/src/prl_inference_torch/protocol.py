"""Request parsing and validation of this backend's HTTP routes.

The shared request models and error reply are core's :mod:`prl.contracts.http`; this adds
the chat, completion and token-in/token-out bodies (vLLM's ``/inference/v1/generate``
schema: ``{"token_ids": [...], "sampling_params": {...}}``) and the checks of sampling
values against the model's context.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from prl.contracts.http import ApiError, OpenModel, SamplingFields
from prl_inference_torch.engine import GenParams

MAX_TOP_LOGPROBS = 20


TokenId = Annotated[int, Field(ge=0)]  # below the vocabulary size too: see document_limits
Text = Annotated[str, Field(min_length=1)]
TopLogprobs = Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)]


class ChatMessage(OpenModel):
    # The roles chat templates render; a template may silently drop any other (the tiny
    # model's does), leaving an empty prompt, so others are refused up front.
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class TorchSampling(SamplingFields):
    prompt_logprobs: TopLogprobs | None = None


class ChatRequest(TorchSampling):
    # top_logprobs above 0 needs logprobs: true (the route refuses it otherwise)
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"logprobs": {"const": True}}, "required": ["logprobs"]},
                {"properties": {"top_logprobs": {"anyOf": [{"type": "null"}, {"const": 0}]}}},
            ]
        }
    )

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = Field(
        default=False, description="continue the final message, which must then have text content"
    )
    skip_special_tokens: bool = True


class CompletionRequest(TorchSampling):
    model: str | None = None
    prompt: (
        Text
        | Annotated[list[Text], Field(min_length=1)]
        | Annotated[list[TokenId], Field(min_length=1)]
        | Annotated[list[Annotated[list[TokenId], Field(min_length=1)]], Field(min_length=1)]
    )
    logprobs: TopLogprobs | None = None
    stream: bool = Field(default=False, description="stream the answer (server-sent events); takes a single prompt")
    stream_options: dict[str, Any] | None = None
    echo: bool = False
    skip_special_tokens: bool = True


class GenerateSampling(TorchSampling):
    logprobs: TopLogprobs | None = None


class GenerateRequest(OpenModel):
    token_ids: list[TokenId] = Field(min_length=1)
    sampling_params: GenerateSampling = Field(default_factory=GenerateSampling)
    model: str | None = None
    # Only false: documented as such, refused by the route with a pointer to /v1/completions.
    stream: bool = Field(default=False, json_schema_extra={"enum": [False]})
    images: list[str] | None = Field(
        default=None,
        description="Images of a vision-language prompt (base64 data: or http(s):// URLs), in the order of "
        "their placeholders: token_ids hold one image token per image, widened by the server to the "
        "image's patch count (prompt_token_ids in the response is the widened prompt).",
    )


def document_limits(schema: dict[str, Any], state: Any) -> None:
    """Write into the OpenAPI ``schema`` the bounds only the running server knows, so that a
    request the document calls valid passes the server's checks: token ids below the
    vocabulary size, prompts within ``max_prompt_tokens`` and the context, ``n`` and
    ``max_tokens`` within ``server.limits``, no ``images`` for a text model. (That prompt
    plus ``max_tokens`` fit the context together is a relation between two fields that JSON
    Schema cannot state.)"""
    limits = state.limits
    longest = min(limits.max_prompt_tokens or state.max_model_len - 1, state.max_model_len - 1)
    most_tokens = min(limits.max_tokens or state.max_model_len - 1, state.max_model_len - 1)

    def visit(node: Any, key: str = "") -> None:
        if isinstance(node, list):
            for item in node:
                visit(item, key)
            return
        if not isinstance(node, dict):
            return
        kind, items = node.get("type"), node.get("items", {})
        if kind == "integer" and key in ("token_ids", "prompt"):
            node["maximum"] = state.vocab_size - 1
        elif kind == "integer" and key in ("max_tokens", "max_completion_tokens"):
            node["maximum"] = most_tokens
        elif kind == "integer" and key == "n":
            node["maximum"] = limits.max_n
            node["description"] = f"completions per prompt; n x prompts <= {limits.max_n} (server.limits.max_n)"
        elif kind == "array" and key == "images" and getattr(state, "vision", None) is None:
            node["maxItems"] = 0  # a text model: a request with images is refused
            node["description"] = "The served model is a text model: no images."
        elif kind == "array" and key in ("token_ids", "prompt"):
            # a list of token ids is one prompt; a list of prompts is n x prompts completions
            node["maxItems"] = longest if items.get("type") == "integer" else limits.max_n
        for name, child in node.items():
            if name == "properties":
                for prop, sub in child.items():
                    visit(sub, prop)
            elif name in ("items", "anyOf", "oneOf"):
                visit(child, key)

    for model in schema.get("components", {}).get("schemas", {}).values():
        visit(model)


def gen_params(
    fields: SamplingFields,
    prompt_len: int,
    max_model_len: int,
    *,
    logprobs: int | None,
    max_tokens: int | None = None,
    sampling_mask: bool = False,
    mask_top_k: int | None = None,
) -> GenParams:
    """Check sampling fields against the context and turn them into engine parameters.
    ``sampling_mask``: the response reports each token's kept ids (generate); then a request
    truncating with top_p alone keeps at most ``mask_top_k`` ids of its nucleus (the
    default top_k bound, applied after top_p so a nucleus within it is sampled unchanged)."""
    temperature = 1.0 if fields.temperature is None else fields.temperature
    top_p = 1.0 if fields.top_p is None else fields.top_p
    top_k = fields.top_k or 0
    if temperature < 0:
        raise ApiError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ApiError(f"top_p must be in (0, 1], got {top_p}")
    if top_k < -1:
        raise ApiError(f"top_k must be -1, 0 (off) or positive, got {top_k}")
    if fields.n < 1:
        raise ApiError(f"n must be >= 1, got {fields.n}")
    for name, value in (("logprobs", logprobs), ("prompt_logprobs", fields.prompt_logprobs)):
        if value is not None and not 0 <= value <= MAX_TOP_LOGPROBS:
            raise ApiError(f"{name} must be between 0 and {MAX_TOP_LOGPROBS}, got {value}")
    if prompt_len >= max_model_len:
        raise ApiError(f"prompt has {prompt_len} tokens; the context (max_model_len) is {max_model_len}")
    room = max_model_len - prompt_len
    want = max_tokens if max_tokens is not None else fields.max_tokens
    if want is not None and want < 1:
        raise ApiError(f"max_tokens must be >= 1, got {want}")
    if want is not None and want > room:
        raise ApiError(
            f"max_tokens ({want}) + prompt ({prompt_len} tokens) exceeds the context (max_model_len {max_model_len})"
        )
    stop = [fields.stop] if isinstance(fields.stop, str) else list(fields.stop or [])
    top_k = max(top_k, 0)
    cap = mask_top_k if sampling_mask and mask_top_k and top_p < 1.0 and top_k == 0 else 0
    return GenParams(
        max_tokens=want or room,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        sampling_mask=sampling_mask,
        mask_cap=cap,
        seed=fields.seed,
        n=fields.n,
        stop=[s for s in stop if s],
        stop_token_ids=list(fields.stop_token_ids or []),
        ignore_eos=fields.ignore_eos,
        logprobs=logprobs,
        prompt_logprobs=fields.prompt_logprobs,
    )


def check_token_ids(ids: list[int], vocab: int, what: str = "token_ids") -> None:
    if not ids:
        raise ApiError(f"{what} is empty")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ApiError(f"{what} holds ids outside the vocabulary (size {vocab}): {bad[:5]}")
