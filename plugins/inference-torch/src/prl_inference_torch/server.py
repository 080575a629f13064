"""The HTTP API of ``docs/inference.md`` over one :class:`Engine`.

Routes: ``GET /health``, ``/liveness``, ``/v1/models``, ``/metrics``, ``/is_paused``;
``POST /v1/chat/completions`` and ``/v1/completions`` (both stream with ``stream: true``),
``/inference/v1/generate`` (token-in/token-out; ``max_tokens 1`` with ``prompt_logprobs``
is prefill scoring); admin ``/update_weights``, ``/load_lora_adapter``, ``/pause``,
``/resume``. Admin routes need ``Authorization: Bearer <api_key>`` whenever a key is set
(and one must be set to bind a non-loopback address).

Every error is a JSON body ``{"error": {"message", "type", "code"}}`` with a 4xx status for
bad input; nothing a client sends stops the server. ``server.limits`` bounds each request
(n, prompt tokens, max_tokens: 400; body size: 413) and the tokens in flight: a request
over that budget waits its turn, and once the wait queue is full the answer is 503 (see
:mod:`prl.serving_limits`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException

from prl.aio import wait_event
from prl.config.components import ServerLimitsConfig
from prl.contracts.http import ApiError
from prl.images import PixelInputs
from prl.serving import error_responses, openapi_as_served
from prl.serving_limits import (
    BodyLimit,
    TokenBudget,
    busy_headers,
    check_request,
    default_max_tokens,
    request_tokens,
)
from prl_inference_torch import openai as fmt
from prl_inference_torch.admin import admin_routes
from prl_inference_torch.engine import Engine
from prl_inference_torch.engine import Request as EngineRequest
from prl_inference_torch.protocol import (
    ChatRequest,
    CompletionRequest,
    GenerateRequest,
    check_token_ids,
    document_limits,
    gen_params,
)
from prl_inference_torch.vision import Vision, refuse_images
from prl_inference_torch.weights import LoraSet

log = logging.getLogger("prl_inference_torch")


@dataclass
class ServerState:
    engine: Engine
    tokenizer: Any
    model_name: str
    max_model_len: int
    vocab_size: int
    lora: LoraSet
    api_key: str | None = None
    chat_template: str | None = None
    weights_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    lora_paths: dict[str, str] = field(default_factory=dict)
    broadcast: Any = None  # a prl.contracts.broadcast.BroadcastJoin once /init_broadcaster ran
    broadcast_at: str = ""  # the trainer's host:port it joins
    admin_timeout: float = 600.0  # server.admin_timeout
    stopping: bool = False  # set once SIGTERM/SIGINT starts the shutdown: admin waits give up
    limits: ServerLimitsConfig = field(default_factory=ServerLimitsConfig)
    budget: TokenBudget | None = None
    mask_top_k: int | None = None  # top_k injected into generate requests with top_p alone
    vision: Vision | None = None  # a vision-language model's image processor (vision.py)

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = TokenBudget(self.limits.max_tokens_in_flight, self.limits.max_queued_requests)

    def adapter_for(self, model: str | None) -> str | None:
        """The LoRA adapter a request's ``model`` selects; 404 for a name nobody serves."""
        if not model or model == self.model_name:
            return None
        if model in self.lora_paths:
            return model
        raise ApiError(
            f"model '{model}' is not served here (served: {', '.join([self.model_name, *self.lora_paths])})",
            404,
            "NotFoundError",
        )


def build_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="prl inference (torch)")
    app.state.prl = state
    app.add_middleware(BodyLimit, max_bytes=state.limits.max_body_bytes)
    _errors(app)
    _info_routes(app, state)
    _token_route(app, state)
    _openai_routes(app, state)
    admin_routes(app, state)
    openapi_as_served(app, lambda schema: document_limits(schema, state))
    return app


def _info_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "version": state.engine.version, "paused": state.engine.paused}

    @app.get("/liveness")
    async def liveness() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/is_paused")
    async def is_paused() -> dict[str, bool]:
        return {"is_paused": state.engine.paused}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        now = int(time.time())
        served = [
            (state.model_name, state.model_name, None),
            *((n, p, state.model_name) for n, p in state.lora_paths.items()),
        ]
        data = [
            {
                "id": name,
                "object": "model",
                "created": now,
                "owned_by": "prl",
                "root": root,
                "parent": parent,
                "max_model_len": state.max_model_len,
            }
            for name, root, parent in served
        ]
        return {"object": "list", "data": data}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        e = state.engine
        lines = [
            f"prl_generation_tokens_total {e.tokens_generated}",
            f"prl_sampling_mask_tokens_total {e.mask_tokens}",
            f"prl_sampling_mask_bounded_total {e.mask_bounded}",
            f"prl_requests_running {e.running}",
            f"prl_requests_waiting {e.waiting}",
            f"prl_tokens_in_flight {state.budget.in_flight}",
            f"prl_requests_queued {state.budget.queued}",
            f"prl_policy_version {e.version}",
        ]
        return PlainTextResponse("\n".join(lines) + "\n")


# What a generating route answers besides 200: bad input, an unknown model, a body over
# the limit, an engine failure, a full wait queue.
GENERATION_ERRORS = error_responses(400, 404, 413, 500, 503)
STREAM = {200: {"content": {"text/event-stream": {}}, "description": "JSON, or server-sent events with stream: true"}}


def _token_route(app: FastAPI, state: ServerState) -> None:
    @app.post("/inference/v1/generate", responses=GENERATION_ERRORS)
    async def generate(body: GenerateRequest, request: Request) -> Any:
        if body.stream:
            raise ApiError("streaming is not supported on /inference/v1/generate; use /v1/completions")
        adapter = state.adapter_for(body.model)
        sp = body.sampling_params
        check_token_ids(body.token_ids, state.vocab_size)
        ids, pixels = await asyncio.to_thread(_token_prompt, state, body)
        check_request(state.limits, n=sp.n, prompt_lens=[len(ids)], max_tokens=sp.max_tokens)
        want = default_max_tokens(state.limits, sp.max_tokens, len(ids), state.max_model_len)
        params = gen_params(
            sp,
            len(ids),
            state.max_model_len,
            logprobs=sp.logprobs,
            max_tokens=want,
            sampling_mask=True,
            mask_top_k=state.mask_top_k,
        )
        req = EngineRequest(ids, params, adapter, pixels=pixels)
        async with state.budget.hold(_tokens(req)):
            await _run_request(state, req, request)
        return fmt.generate_body(req, f"gen-{uuid.uuid4().hex}", body.model or state.model_name)


def _openai_routes(app: FastAPI, state: ServerState) -> None:
    @app.post("/v1/completions", responses={**GENERATION_ERRORS, **STREAM})
    async def completions(body: CompletionRequest, request: Request) -> Any:
        adapter = state.adapter_for(body.model)
        check_request(state.limits, n=body.n, prompt_lens=_prompt_count(body.prompt) * [0], max_tokens=body.max_tokens)
        prompts = await asyncio.to_thread(_completion_prompts, state, body.prompt)
        check_request(state.limits, n=body.n, prompt_lens=[len(p) for p in prompts], max_tokens=body.max_tokens)
        reqs = []
        for ids in prompts:
            want = default_max_tokens(state.limits, body.max_tokens, len(ids), state.max_model_len)
            params = gen_params(body, len(ids), state.max_model_len, logprobs=body.logprobs, max_tokens=want)
            reqs.append(EngineRequest(ids, params, adapter))
        if body.stream:
            if len(reqs) != 1:
                raise ApiError("stream: true takes a single prompt")
            return await _stream(state, reqs[0], body, chat=False)
        async with state.budget.hold(sum(_tokens(r) for r in reqs)):
            for r in reqs:
                await _run_request(state, r, request)
        return _completion_body(state, body, reqs)

    @app.post("/v1/chat/completions", responses={**GENERATION_ERRORS, **STREAM})
    async def chat(body: ChatRequest, request: Request) -> Any:
        adapter = state.adapter_for(body.model)
        want, field_name = _chat_max_tokens(state, body)
        ids, pixels = await asyncio.to_thread(_chat_prompt, state, body)
        check_request(state.limits, n=body.n, prompt_lens=[len(ids)], max_tokens=want, field=field_name)
        top = (body.top_logprobs or 0) if body.logprobs else None
        if body.top_logprobs and not body.logprobs:
            raise ApiError("top_logprobs needs logprobs: true")
        want = default_max_tokens(state.limits, want, len(ids), state.max_model_len)
        params = gen_params(body, len(ids), state.max_model_len, logprobs=top, max_tokens=want)
        req = EngineRequest(ids, params, adapter, pixels=pixels)
        if body.stream:
            return await _stream(state, req, body, chat=True)
        async with state.budget.hold(_tokens(req)):
            await _run_request(state, req, request)
        return _chat_body(state, body, req)


def _chat_max_tokens(state: ServerState, body: ChatRequest) -> tuple[int | None, str]:
    """The output length a chat request asks for, and the field it came from
    (``max_completion_tokens`` wins); both fields are bounded as the OpenAPI document says,
    the unused one too. Checked before the prompt is rendered."""
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(body, name)
        check_request(state.limits, n=body.n, prompt_lens=[0], max_tokens=value, field=name)
        if value is not None and value >= state.max_model_len:
            raise ApiError(f"{name} ({value}) leaves no room for a prompt (max_model_len {state.max_model_len})")
    if body.max_completion_tokens is not None:
        return body.max_completion_tokens, "max_completion_tokens"
    return body.max_tokens, "max_tokens"


def _errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=busy_headers(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        msg = f"invalid request: {where + ': ' if where else ''}{first.get('msg', 'malformed body')}"
        return JSONResponse(ApiError(msg).body(), status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        # exc.headers carries the Allow header of a 405 (RFC 9110 §15.5.6)
        body = ApiError(str(exc.detail), exc.status_code, "HTTPError").body()
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


def _token_prompt(state: ServerState, body: GenerateRequest) -> tuple[list[int], PixelInputs | None]:
    """The token route's prompt, image placeholders widened when ``images`` come with it."""
    if not body.images:
        return list(body.token_ids), None
    if state.vision is None:
        raise ApiError(f"images: {state.model_name} is a text model and cannot see images (see docs/vlm.md)")
    return state.vision.widen(body.token_ids, body.images)


def _chat_prompt(state: ServerState, body: ChatRequest) -> tuple[list[int], PixelInputs | None]:
    """The prompt's token ids, and its images' pixels when the model sees images."""
    messages = [m.model_dump(exclude_unset=True) for m in body.messages]
    if state.vision is None:
        refuse_images(messages, state.model_name)
        return _chat_text(state, body, messages), None
    return state.vision.render(messages, lambda msgs: _chat_text(state, body, msgs))


def _chat_text(state: ServerState, body: ChatRequest, messages: list[dict[str, Any]]) -> list[int]:
    kwargs = dict(body.chat_template_kwargs or {})
    try:
        text = state.tokenizer.apply_chat_template(
            messages,
            tools=body.tools,
            tokenize=False,
            chat_template=state.chat_template,
            add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
            continue_final_message=body.continue_final_message,
            **kwargs,
        )
    except Exception as exc:  # template errors are the caller's messages, not a server fault
        raise ApiError(f"cannot render messages with the chat template: {exc}") from exc
    ids = state.tokenizer.encode(text, add_special_tokens=False)
    check_token_ids(ids, state.vocab_size, "rendered prompt")
    return ids


def _completion_prompts(state: ServerState, prompt: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        prompt = [prompt]
    if prompt and all(isinstance(p, int) for p in prompt):
        prompt = [prompt]
    out = []
    for p in prompt:
        ids = state.tokenizer.encode(p, add_special_tokens=False) if isinstance(p, str) else list(p)
        check_token_ids(ids, state.vocab_size, "prompt")
        out.append(ids)
    if not out:
        raise ApiError("prompt is empty")
    return out


def _prompt_count(prompt: Any) -> int:
    """How many prompts a completions ``prompt`` holds (checked before tokenizing them)."""
    if isinstance(prompt, str) or (prompt and all(isinstance(p, int) for p in prompt)):
        return 1
    return len(prompt)


def _tokens(req: EngineRequest) -> int:
    return request_tokens(req.params.n, len(req.prompt_ids), req.params.max_tokens, 0)


async def _run_request(state: ServerState, req: EngineRequest, request: Request) -> None:
    """Submit and wait; a client that hangs up gets its rows dropped from the batch."""
    event = _attach(req, only_when_done=True)
    state.engine.submit(req)
    try:
        while not req.done:
            if not await wait_event(event, 1.0) and await request.is_disconnected():
                state.engine.cancel(req)
                return
            event.clear()
    except asyncio.CancelledError:
        state.engine.cancel(req)
        raise
    if req.error:
        raise ApiError(req.error, 500, "InternalServerError")


def _attach(req: EngineRequest, only_when_done: bool = False) -> asyncio.Event:
    """An event the engine thread sets after each change (or, for a whole response, at the end).

    Waking the event loop for every token of every row would make the HTTP side the
    bottleneck at large batches, so non-streaming requests are woken once.
    """
    loop, event = asyncio.get_running_loop(), asyncio.Event()
    if only_when_done:
        req.wake = lambda: loop.call_soon_threadsafe(event.set) if req.done else None
    else:
        req.wake = lambda: loop.call_soon_threadsafe(event.set)
    return event


def _head(kind: str, model: str) -> dict[str, Any]:
    return {"id": f"{kind}-{uuid.uuid4().hex}", "created": int(time.time()), "model": model}


def _chat_body(state: ServerState, body: ChatRequest, req: EngineRequest) -> dict[str, Any]:
    choices = []
    for comp in req.completions:
        choices.append(
            {
                "index": comp.index,
                "message": {
                    "role": "assistant",
                    "content": fmt.completion_text(state.tokenizer, comp, body.skip_special_tokens),
                },
                "logprobs": fmt.chat_logprobs(state.tokenizer, comp) if body.logprobs else None,
                "finish_reason": comp.finish_reason,
                "stop_reason": comp.stop_reason,
                "token_ids": comp.token_ids,
                "weight_versions": fmt.weight_versions(comp),
            }
        )
    return {
        **_head("chatcmpl", body.model or state.model_name),
        "object": "chat.completion",
        "choices": choices,
        "usage": fmt.usage([req]),
        "prompt_token_ids": req.prompt_ids,
        "version": req.version,
    }


def _completion_body(state: ServerState, body: CompletionRequest, reqs: list[EngineRequest]) -> dict[str, Any]:
    choices = []
    for i, req in enumerate(reqs):
        for comp in req.completions:
            choices.append(
                {
                    "index": i * body.n + comp.index,
                    "text": fmt.completion_text(state.tokenizer, comp, body.skip_special_tokens),
                    "logprobs": fmt.completion_logprobs(state.tokenizer, comp) if body.logprobs is not None else None,
                    "finish_reason": comp.finish_reason,
                    "stop_reason": comp.stop_reason,
                    "token_ids": comp.token_ids,
                    "prompt_token_ids": req.prompt_ids,
                    "weight_versions": fmt.weight_versions(comp),
                }
            )
    return {
        **_head("cmpl", body.model or state.model_name),
        "object": "text_completion",
        "choices": choices,
        "usage": fmt.usage(reqs),
        "version": reqs[0].version,
    }


async def _stream(state: ServerState, req: EngineRequest, body: Any, chat: bool) -> StreamingResponse:
    """Admit before answering, so a full queue is still a 503 rather than an error event."""
    tokens = _tokens(req)
    await state.budget.acquire(tokens)
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            state.budget.release(tokens)

    # The generator's ``finally`` releases; the background task covers a response that
    # was never iterated (the client left before the first byte).
    return StreamingResponse(
        _events(state, req, body, chat, release), media_type="text/event-stream", background=BackgroundTask(release)
    )


async def _events(
    state: ServerState, req: EngineRequest, body: Any, chat: bool, release: Any = lambda: None
) -> AsyncIterator[str]:
    """SSE chunks: text (and token id) deltas per completion, then usage and ``[DONE]``."""
    head = _head("chatcmpl" if chat else "cmpl", body.model or state.model_name)
    head["object"] = "chat.completion.chunk" if chat else "text_completion"
    event = _attach(req)
    state.engine.submit(req)
    sent_text = [0] * len(req.completions)
    sent_tok = [0] * len(req.completions)
    try:
        if chat:
            for c in req.completions:
                delta = {"role": "assistant", "content": ""}
                first = {"index": c.index, "delta": delta, "logprobs": None, "finish_reason": None}
                yield fmt.sse({**head, "choices": [first]})
        finished = set()
        while len(finished) < len(req.completions):
            await event.wait()
            event.clear()
            if req.error:
                yield fmt.sse(ApiError(req.error, 500, "InternalServerError").body())
                break
            for c in req.completions:
                if c.index in finished or len(c.token_ids) == sent_tok[c.index]:
                    continue
                done = c.finish_reason is not None
                text = fmt.stream_safe_text(state.tokenizer, c, req.params.stop, body.skip_special_tokens)
                delta_text, start = text[sent_text[c.index] :], sent_tok[c.index]
                sent_text[c.index] = max(sent_text[c.index], len(text))
                sent_tok[c.index] = len(c.token_ids)
                choice = {
                    "index": c.index,
                    "finish_reason": c.finish_reason if done else None,
                    "token_ids": c.token_ids[start:],
                }
                if chat:
                    choice["delta"] = {"content": delta_text}
                    choice["logprobs"] = fmt.chat_logprobs(state.tokenizer, c, start) if body.logprobs else None
                else:
                    choice["text"] = delta_text
                    choice["logprobs"] = (
                        fmt.completion_logprobs(state.tokenizer, c, start) if body.logprobs is not None else None
                    )
                if done:
                    choice["stop_reason"] = c.stop_reason
                    finished.add(c.index)
                yield fmt.sse({**head, "choices": [choice]})
        if (body.stream_options or {}).get("include_usage"):
            yield fmt.sse({**head, "choices": [], "usage": fmt.usage([req])})
        yield fmt.sse("[DONE]")
    finally:
        if not req.done:
            state.engine.cancel(req)
        release()
