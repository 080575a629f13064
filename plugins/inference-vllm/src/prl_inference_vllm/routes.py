"""prl's routes on top of vLLM's OpenAI app (``docs/inference.md``).

vLLM serves ``/v1/models``, ``/v1/chat/completions`` and ``/v1/completions``; prl wraps the
two completion routes so completion ``token_ids`` are returned unless a client says
otherwise, the prompt's prefix-cache salt names the policy version (unless the client sets
``cache_salt``) and the reply names the policy ``version``. prl adds ``/health`` (with version
and pause state), ``/liveness``, ``/is_paused``, token-in/token-out
``/inference/v1/generate`` and the admin routes ``/update_weights``,
``/load_lora_adapter``, ``/pause``, ``/resume`` and ``/init_broadcaster`` (the nccl weight
transport: every worker joins the trainer's broadcast group in the background, and
``/update_weights {"weight_dir": null}`` then waits, at most ``server.admin_timeout`` (504
past it), for every worker to have joined, and receives a version in-band,
``collective_rpc("prl_receive_weights")``).
Admin routes need ``Authorization: Bearer <api_key>`` whenever a key is set, and the
backend refuses to bind a non-loopback address without one.

Weight updates: the directory is checked against the served model first (see
:mod:`prl_inference_vllm.weights`); then, unless a client already paused the engine, the
scheduler is paused with in-flight requests kept (mode "keep", KV cache kept), every
worker reloads the weights in place (``collective_rpc("prl_reload_weights")``, see
:mod:`prl_inference_vllm.worker`), the prefix
cache is reset so no new request reuses blocks of the old policy, the engine's weight
version label is set (vLLM then records ``weight_versions`` spans per completion) and the
scheduler resumes.

``server.limits`` applies to every generating route (see :mod:`prl_inference_vllm.limits`):
a request over a per-request limit is a 400 naming the setting, a body over
``max_body_bytes`` a 413, and a request over the token budget waits; a full wait queue is
a 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from prl.config.components import ServerLimitsConfig
from prl.contracts.broadcast import broadcast_join
from prl.contracts.http import ApiError, InitBroadcasterRequest, LoraRequest, UpdateWeightsRequest
from prl.serving import error_responses
from prl.serving_limits import BodyLimit, TokenBudget, busy_headers, check_request, default_max_tokens
from prl_inference_vllm.generate import GenerateRequest, generate_body, new_request_id, sampling_params
from prl_inference_vllm.limits import check_openai_body, limit_engine
from prl_inference_vllm.weights import WeightError, check_lora_dir, check_weight_dir

log = logging.getLogger("prl_inference_vllm")
JOIN_POLL_S = 0.5


@dataclass
class PrlState:
    engine: Any
    model_name: str
    max_model_len: int
    vocab_size: int
    max_logprobs: int
    served_config: dict[str, Any]
    served_shapes: dict[str, list[int]] | None
    api_key: str | None = None
    lora_enabled: bool = False
    version: int = 0
    paused: bool = False
    broadcasting: bool = False  # the workers joined a weight-broadcast group (nccl transport)
    broadcast_at: str = ""  # the trainer's host:port
    admin_timeout: float = 600.0  # server.admin_timeout
    weights_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    limits: ServerLimitsConfig = field(default_factory=ServerLimitsConfig)
    budget: TokenBudget | None = None

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = TokenBudget(self.limits.max_tokens_in_flight, self.limits.max_queued_requests)


def install(app: FastAPI, state: PrlState) -> None:
    """Add prl's routes ahead of vLLM's, so a path both define is answered by prl; bound the
    body size and make every engine call hold the token budget."""
    app.state.prl = state
    if app.middleware_stack is None:
        app.add_middleware(BodyLimit, max_bytes=state.limits.max_body_bytes)
    else:  # vLLM has built its middleware stack already: wrap it from outside
        app.middleware_stack = BodyLimit(app.middleware_stack, max_bytes=state.limits.max_body_bytes)
    limit_engine(state.engine, state.limits, state.budget, state.max_model_len)
    router = _router(state)
    before = len(app.router.routes)
    app.include_router(router)
    added = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[0:0] = added


class _Route(APIRoute):
    """Answers :class:`ApiError` itself: vLLM's catch-all handler would turn it into a 500."""

    def get_route_handler(self):
        inner = super().get_route_handler()

        async def handler(request: Request):
            try:
                return await inner(request)
            except ApiError as exc:
                return JSONResponse(exc.body(), status_code=exc.status, headers=busy_headers(exc))

        return handler


def _admin(state: PrlState):
    def check(request: Request) -> None:
        if state.api_key and request.headers.get("authorization") != f"Bearer {state.api_key}":
            raise ApiError("admin route needs 'Authorization: Bearer <server.api_key>'", 401, "AuthenticationError")

    return Depends(check)


async def _body(request: Request, model: type[BaseModel]) -> Any:
    try:
        raw = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError("request body is not valid JSON") from None
    if not isinstance(raw, dict):
        raise ApiError("request body must be a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ApiError(_first_error(exc.errors())) from None


def _first_error(errors: list[dict[str, Any]]) -> str:
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    return f"invalid request: {where + ': ' if where else ''}{first.get('msg', 'malformed body')}"


def _router(state: PrlState) -> APIRouter:
    router = APIRouter(route_class=_Route)
    engine = state.engine

    @router.get("/health")
    async def health() -> JSONResponse:
        try:
            await engine.check_health()
        except Exception as exc:  # a dead engine must read as unhealthy, not crash the route
            return JSONResponse(ApiError(f"engine is not healthy: {exc}", 503, "ServiceUnavailable").body(), 503)
        return JSONResponse({"status": "ok", "version": state.version, "paused": state.paused})

    @router.get("/liveness")
    async def liveness() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/is_paused")
    async def is_paused() -> dict[str, bool]:
        return {"is_paused": state.paused}

    @router.post("/inference/v1/generate")
    async def generate(request: Request) -> Any:
        from vllm.entrypoints.serve.utils.api_utils import with_cancellation

        body = await _body(request, GenerateRequest)
        # A client that hangs up cancels the task, and vLLM aborts the request.
        return await with_cancellation(_generate)(body, request, state)

    @router.post("/v1/completions")
    async def completions(request: Request) -> Any:
        from vllm.entrypoints.openai.completion.api_router import create_completion
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest

        return await _openai(state, request, CompletionRequest, create_completion)

    @router.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        from vllm.entrypoints.openai.chat_completion.api_router import create_chat_completion
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        return await _openai(state, request, ChatCompletionRequest, create_chat_completion)

    _admin_routes(router, state)
    return router


def _admin_routes(router: APIRouter, state: PrlState) -> None:
    admin = _admin(state)
    engine = state.engine

    @router.post("/pause", dependencies=[admin], responses=error_responses(401))
    async def pause() -> dict[str, str]:
        # "keep": in-flight requests stay scheduled-but-frozen, KV cache untouched.
        await engine.pause_generation(mode="keep", clear_cache=False)
        state.paused = True
        return {"status": "paused"}

    @router.post("/resume", dependencies=[admin], responses=error_responses(401))
    async def resume() -> dict[str, str]:
        await engine.resume_generation()
        state.paused = False
        return {"status": "resumed"}

    @router.post("/update_weights", dependencies=[admin], responses=error_responses(400, 401, 413, 500, 504))
    async def update_weights(request: Request) -> dict[str, Any]:
        body = await _body(request, UpdateWeightsRequest)
        return await _update_weights(state, body)

    @router.post("/load_lora_adapter", dependencies=[admin], responses=error_responses(400, 401, 413))
    async def load_lora_adapter(request: Request) -> dict[str, Any]:
        body = await _body(request, LoraRequest)
        return await _load_lora(state, request.app, body)

    @router.post("/init_broadcaster", dependencies=[admin], responses=error_responses(400, 401, 413, 500, 501))
    async def init_broadcaster(request: Request) -> dict[str, Any]:
        body = await _body(request, InitBroadcasterRequest)
        try:  # here, where it is one line, rather than from inside every worker
            broadcast_join()
        except LookupError as exc:
            raise ApiError(f"weight broadcast: {exc}", 501, "NotImplementedError") from None
        kwargs = {
            "host": body.host,
            "port": body.port,
            "rank_offset": body.rank_offset,
            "world_size": 1 + body.inference_world_size,
            "timeout": body.timeout,
            "backend": body.backend,
        }
        try:
            await state.engine.collective_rpc("prl_init_broadcaster", kwargs=kwargs)
        except Exception as exc:  # noqa: BLE001 - reported to the caller in one line
            raise ApiError(f"joining the weight-broadcast group failed: {exc}", 500, "InternalServerError") from None
        state.broadcasting = True
        state.broadcast_at = f"{body.host}:{body.port}"
        return {"status": "joining", "rank_offset": body.rank_offset}


def _lora_for(state: PrlState, app: FastAPI, model: str | None) -> Any:
    if not model or model == state.model_name:
        return None
    loras = app.state.openai_serving_models.lora_requests
    if model in loras:
        return loras[model]
    served = ", ".join([state.model_name, *loras])
    raise ApiError(f"model '{model}' is not served here (served: {served})", 404, "NotFoundError")


async def _generate(body: GenerateRequest, request: Request, state: PrlState) -> dict[str, Any]:
    from vllm.inputs import TokensPrompt

    if body.stream:
        raise ApiError("stream: true is not supported on /inference/v1/generate; use /v1/completions")
    if body.images:
        # ignoring them would sample as if no image had been shown
        raise ApiError(
            "images: the vllm backend's /inference/v1/generate takes token ids only; images there are "
            "not supported yet (the torch backend takes them, see docs/vlm.md)"
        )
    lora = _lora_for(state, request.app, body.model)
    sp_in = body.sampling_params
    check_request(state.limits, n=sp_in.n, prompt_lens=[len(body.token_ids)], max_tokens=sp_in.max_tokens)
    bad = [t for t in body.token_ids if not 0 <= t < state.vocab_size]
    if bad:
        raise ApiError(f"token_ids holds ids outside the vocabulary (size {state.vocab_size}): {bad[:5]}")
    if sp_in.max_tokens is None:
        sp_in.max_tokens = default_max_tokens(state.limits, None, len(body.token_ids), state.max_model_len)
    sp = sampling_params(sp_in, len(body.token_ids), state.max_model_len, state.max_logprobs)
    rid = new_request_id(body.request_id)
    # The salt keeps prefix-cache blocks of one policy version from serving another.
    prompt = TokensPrompt(prompt_token_ids=list(body.token_ids), cache_salt=f"prl-v{state.version}")
    final = None
    try:
        async for out in state.engine.generate(prompt, sp, rid, lora_request=lora):
            final = out
    except ValueError as exc:  # input checks of vLLM's processor (prompt too long, ...)
        raise ApiError(str(exc)) from None
    if final is None:
        raise ApiError("request produced no output (aborted)", 499, "ClientClosedRequest")
    return generate_body(final, rid, body.model or state.model_name, body.sampling_params.logprobs or 0, state.version)


async def _openai(state: PrlState, request: Request, model: type[BaseModel], handler: Any) -> Any:
    """Call vLLM's handler with ``return_token_ids`` on by default; name the policy version."""
    try:
        raw = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError("request body is not valid JSON") from None
    if not isinstance(raw, dict):
        raise ApiError("request body must be a JSON object")
    check_openai_body(state.limits, raw)
    raw.setdefault("return_token_ids", True)
    # As on the generate route: prefix-cache blocks of one policy version never serve another.
    raw.setdefault("cache_salt", f"prl-v{state.version}")
    try:
        parsed = model.model_validate(raw)
    except ValidationError as exc:
        raise ApiError(_first_error(exc.errors())) from None
    version = state.version
    response = await handler(parsed, request)
    if isinstance(response, JSONResponse) and response.status_code == 200:
        payload = json.loads(response.body)
        if isinstance(payload, dict):
            payload["version"] = version
            return JSONResponse(payload)
    return response


async def _update_weights(state: PrlState, body: UpdateWeightsRequest) -> dict[str, Any]:
    if body.weight_dir is None:
        if not state.broadcasting:
            raise ApiError(
                "weight_dir is null, but this server has not joined a weight-broadcast group "
                "(POST /init_broadcaster first; the nccl transport does)"
            )
        await _wait_joined(state)
        await _swap_weights(state, body.version, "prl_receive_weights", {}, "the weight broadcast")
        return {"status": "ok", "version": state.version, "weight_dir": None}
    try:
        path = await asyncio.to_thread(check_weight_dir, body.weight_dir, state.served_config, state.served_shapes)
    except WeightError as exc:
        raise ApiError(str(exc)) from None
    kwargs = {"weights_path": str(path.resolve())}
    await _swap_weights(state, body.version, "prl_reload_weights", kwargs, f"'{body.weight_dir}'")
    return {"status": "ok", "version": state.version, "weight_dir": body.weight_dir}


async def _wait_joined(state: PrlState) -> None:
    """Poll every worker until it has joined the broadcast group (or failed to: the receive
    then reports why); 504 after ``server.admin_timeout``."""
    deadline = time.monotonic() + state.admin_timeout
    while not all(await state.engine.collective_rpc("prl_broadcast_joined")):
        if time.monotonic() >= deadline:
            raise ApiError(
                f"gave up after {state.admin_timeout:g} s (server.admin_timeout) waiting for the trainer at "
                f"{state.broadcast_at} to form the weight-broadcast group",
                504,
                "TimeoutError",
            )
        await asyncio.sleep(JOIN_POLL_S)


async def _swap_weights(state: PrlState, version: int | None, rpc: str, kwargs: dict[str, Any], source: str) -> None:
    """Pause (unless a client did), run ``rpc`` on every worker, reset the prefix cache,
    label the new version (``version``, else the one a broadcast carried, else the next),
    resume."""
    engine = state.engine
    async with state.weights_lock:
        we_paused = not state.paused
        if we_paused:
            await engine.pause_generation(mode="keep", clear_cache=False)
        try:
            results = await engine.collective_rpc(rpc, kwargs=kwargs)
            if version is None:
                # A broadcast carries the trainer's version; a directory is the next one.
                sent = results[0] if isinstance(results, list) and results else None
                version = int(sent) if isinstance(sent, int) else state.version + 1
            # Fails while paused requests hold blocks; the per-version cache_salt covers that case.
            await engine.reset_prefix_cache()
            await engine.update_weight_version(str(version))
            state.version = version
        except Exception as exc:
            log.exception("weight update from %s failed", source)
            raise ApiError(f"loading weights from {source} failed: {exc}", 500, "InternalServerError") from None
        finally:
            if we_paused:
                await engine.resume_generation()
    log.info("loaded weights from %s as version %d", source, version)


async def _load_lora(state: PrlState, app: FastAPI, body: LoraRequest) -> dict[str, Any]:
    from vllm.entrypoints.serve.lora.protocol import LoadLoRAAdapterRequest

    if not state.lora_enabled:
        raise ApiError("LoRA is off: set [inference.backend] enable_lora = true")
    if not body.lora_name or body.lora_name == state.model_name:
        raise ApiError(f"lora_name '{body.lora_name}' must be non-empty and differ from the base model's name")
    try:
        await asyncio.to_thread(check_lora_dir, body.lora_path)
    except WeightError as exc:
        raise ApiError(str(exc)) from None
    models = app.state.openai_serving_models
    result = await models.load_lora_adapter(
        LoadLoRAAdapterRequest(lora_name=body.lora_name, lora_path=body.lora_path, load_inplace=True)
    )
    if not isinstance(result, str):  # vLLM's ErrorResponse: the adapter did not fit the model
        raise ApiError(f"cannot load adapter '{body.lora_name}': {result.error.message}")
    # Blocks cached under the adapter's previous weights must not be reused.
    await state.engine.reset_prefix_cache()
    return {"status": "ok", "lora_name": body.lora_name}
