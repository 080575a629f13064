"""The torch engine's end of an in-band weight transport (nccl), met through core's
:mod:`prl.contracts.broadcast`.

``POST /init_broadcaster`` starts joining the trainer's broadcast group in the background
and answers at once: the trainer forms the group only when it publishes its first version.
``POST /update_weights {"weight_dir": null}`` then waits for the join (at most
``server.admin_timeout``: 504 past it, the join going on) and receives one
version on the engine thread, between decoding steps (the orchestrator has paused the
engine), copying each bucket straight into the served parameters. A manifest that does
not fit the served model is refused before any parameter changes, and the broadcast is
still drained so the trainer is not left hanging. The trainer sends the checkpoint layout;
tensors the served model keeps fused (MoE experts) are converted once all have arrived.
"""

from __future__ import annotations

from typing import Any

import torch

from prl.contracts.broadcast import BroadcastError, broadcast_join
from prl.contracts.http import ApiError, InitBroadcasterRequest
from prl_inference_torch.vision import weight_target
from prl_inference_torch.waits import engine_call, wait_until
from prl_inference_torch.weights import architecture_mismatch, model_layout


def start_join(state: Any, body: InitBroadcasterRequest) -> dict[str, Any]:
    try:
        joiner = broadcast_join()
    except LookupError as exc:  # the server cannot do what the request asks: not the caller's fault
        raise ApiError(f"weight broadcast: {exc}", 501, "NotImplementedError") from None
    if body.inference_world_size < 1:
        raise ApiError("inference_world_size must be at least 1")
    # One engine, one worker: this server is rank rank_offset of 1 + inference_world_size.
    joiner.start(body.host, body.port, body.rank_offset, 1 + body.inference_world_size, body.timeout, body.backend)
    state.broadcast = joiner
    state.broadcast_at = f"{body.host}:{body.port}"
    return {"status": "joining", "rank": body.rank_offset, "world_size": 1 + body.inference_world_size}


async def receive_broadcast(state: Any, version: int | None) -> dict[str, Any]:
    if state.broadcast is None:
        raise ApiError(
            "weight_dir is null, but this server has not joined a weight-broadcast group "
            "(POST /init_broadcaster first; the nccl transport does)"
        )
    async with state.weights_lock:
        joiner = state.broadcast
        await wait_until(state, joiner.done, f"the trainer at {state.broadcast_at} to form the weight-broadcast group")
        try:
            group = joiner.group(0)
        except BroadcastError as exc:  # the trainer could not be reached or refused us
            raise ApiError(str(exc), 502, "BadGatewayError") from None
        served = state.engine.model
        model, params = served, served.state_dict(keep_vars=True)

        def check(entries: list) -> str | None:
            nonlocal model, params
            # a vision-language model sent its language part alone loads it through a view
            model = weight_target(served, [name for name, _, _ in entries])
            params = model.state_dict(keep_vars=True)
            problem = architecture_mismatch({name: tuple(shape) for name, _, shape in entries}, model)
            return f"the trainer's weights do not fit the served model ({problem})" if problem else None

        # Tensors in the checkpoint layout (an MoE layer's experts one by one) are kept until
        # the whole version is in, then converted together (weights.model_layout).
        held: dict[str, torch.Tensor] = {}

        @torch.no_grad()
        def sink(pairs: list[tuple[str, torch.Tensor]]) -> None:
            for name, tensor in pairs:
                if name in params:
                    params[name].copy_(tensor.to(params[name].dtype))
                else:
                    held[name] = tensor.clone()  # the bucket's memory is reused for the next one

        @torch.no_grad()
        def swap() -> int:
            got = group.receive(sink, check)
            for name, tensor in model_layout(held, model).items():
                params[name].copy_(tensor.to(params[name].dtype))
            held.clear()
            state.engine.version = version if version is not None else got
            return state.engine.version

        try:
            served = await engine_call(state, swap, "the engine to start receiving the broadcast", drain=True)
        except BroadcastError as exc:
            raise ApiError(str(exc), 500, "InternalServerError") from None
    return {"status": "ok", "version": served, "weight_dir": None}
