"""The torch server's admin routes: ``/pause``, ``/resume``, ``/update_weights``,
``/load_lora_adapter`` and ``/init_broadcaster``.

Each needs ``Authorization: Bearer <server.api_key>`` whenever a key is set (the OpenAPI
document then declares the bearer scheme on them). Every wait on something outside the
request (the engine draining before a swap, the trainer forming the broadcast group) is
bounded by ``server.admin_timeout``: past it the answer is a 504 naming what it waited
for, and a wait that had not started yet is withdrawn so nothing changes behind the
caller's back. A server that is shutting down answers such a wait with 503 at once.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPBearer

from prl.contracts.http import ApiError, InitBroadcasterRequest, LoraRequest, UpdateWeightsRequest
from prl.serving import error_responses
from prl_inference_torch.broadcast import receive_broadcast, start_join
from prl_inference_torch.vision import weight_target
from prl_inference_torch.waits import engine_call
from prl_inference_torch.weights import WeightError, apply_weights, read_lora, read_weights

log = logging.getLogger("prl_inference_torch")


def _admin_dependencies(state: Any) -> list[Any]:
    def admin(request: Request) -> None:
        if state.api_key and request.headers.get("authorization") != f"Bearer {state.api_key}":
            raise ApiError("admin route needs 'Authorization: Bearer <server.api_key>'", 401, "AuthenticationError")

    if not state.api_key:  # open admin routes (loopback only, see prl.serving.admin_api_key)
        return [Depends(admin)]
    # Declares the bearer scheme in the OpenAPI document; the check itself is admin's.
    return [Depends(HTTPBearer(auto_error=False, description="server.api_key")), Depends(admin)]


def admin_routes(app: FastAPI, state: Any) -> None:
    auth = _admin_dependencies(state)
    codes = (401, 413) if state.api_key else (413,)

    @app.post("/pause", dependencies=auth, responses=error_responses(*codes))
    async def pause() -> dict[str, str]:
        state.engine.set_paused(True)
        return {"status": "paused"}

    @app.post("/resume", dependencies=auth, responses=error_responses(*codes))
    async def resume() -> dict[str, str]:
        state.engine.set_paused(False)
        return {"status": "resumed"}

    @app.post("/update_weights", dependencies=auth, responses=error_responses(400, *codes, 500, 502, 503, 504))
    async def update_weights(body: UpdateWeightsRequest) -> dict[str, Any]:
        if body.weight_dir is None:
            return await receive_broadcast(state, body.version)
        return await _load_weight_dir(state, body.weight_dir, body.version)

    @app.post("/load_lora_adapter", dependencies=auth, responses=error_responses(400, *codes, 503, 504))
    async def load_lora_adapter(body: LoraRequest) -> dict[str, Any]:
        if body.lora_name == state.model_name:
            raise ApiError(f"lora_name '{body.lora_name}' is the base model's name")
        try:
            weights = await asyncio.to_thread(read_lora, body.lora_path, state.engine.model)
        except WeightError as exc:
            raise ApiError(str(exc)) from exc
        await engine_call(state, lambda: state.lora.load(body.lora_name, weights), "the engine to load the adapter")
        state.lora_paths[body.lora_name] = body.lora_path
        log.info("serving LoRA adapter '%s' from %s", body.lora_name, body.lora_path)
        return {"status": "ok", "lora_name": body.lora_name}

    @app.post("/init_broadcaster", dependencies=auth, responses=error_responses(400, *codes, 501))
    async def init_broadcaster(body: InitBroadcasterRequest) -> dict[str, Any]:
        return start_join(state, body)


def tensor_names(weight_dir: str) -> list[str]:
    """Names of the tensors in a weight directory's safetensors files (headers only)."""
    from safetensors import safe_open

    names: list[str] = []
    for f in sorted(Path(weight_dir).glob("*.safetensors")) if Path(weight_dir).is_dir() else []:
        if not f.name.startswith("adapter_"):
            with safe_open(str(f), "pt") as fh:
                names += list(fh.keys())
    return names


async def _load_weight_dir(state: Any, weight_dir: str, version: int | None) -> dict[str, Any]:
    async with state.weights_lock:
        model = weight_target(state.engine.model, tensor_names(weight_dir))
        try:
            tensors = await asyncio.to_thread(read_weights, weight_dir, model)
        except WeightError as exc:
            raise ApiError(str(exc)) from exc
        version = version if version is not None else state.engine.version + 1

        def swap() -> int:
            apply_weights(model, tensors)
            state.engine.version = version
            return version

        await engine_call(state, swap, "the engine to finish its running requests before the swap", drain=True)
    return {"status": "ok", "version": version, "weight_dir": weight_dir}
