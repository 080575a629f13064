"""The ``torch`` inference backend: load a transformers model and serve it over HTTP.

``Backend(cfg).serve()`` binds ``cfg.server.host:port`` first (port 0 takes a free port, so
nothing can steal it while the model loads), loads the model and tokenizer, starts the
engine thread and serves until SIGINT/SIGTERM, after which it exits within a few seconds
whatever is in flight (see :data:`prl.serving.SHUTDOWN_GRACE_S`). Once it accepts connections it prints
``listening on http://host:port`` and, when ``backend.ready_file`` (or ``$PRL_READY_FILE``)
names a file, writes that base URL there (atomically, so a reader never sees half of it).
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from prl.contracts import InferenceBackend, InferenceBackendConfig
from prl.logs import setup_logging
from prl.serving import SHUTDOWN_GRACE_S, admin_api_key, announce, bind, ready_file, serve_main

log = logging.getLogger("prl_inference_torch")


class TorchInferenceConfig(InferenceBackendConfig):
    """Embedded inference on transformers with continuous batching (CPU or CUDA)."""

    returns_sampling_masks: ClassVar[bool] = True
    returns_routed_experts: ClassVar[bool] = True

    type: Literal["torch"] = "torch"
    """Selects this backend."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the model runs; auto picks cuda when available, else cpu."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weight dtype; auto is bfloat16 on cuda and float32 on cpu."""
    max_batch_size: Annotated[int, Field(ge=1)] = 64
    """Most sequences decoded together; further requests wait for a free row."""
    max_prefill_tokens: Annotated[int, Field(ge=16)] = 4096
    """Most (padded) prompt tokens in one prefill forward; longer prompts run alone."""
    cuda_graphs: bool = True
    """On cuda, decode dense models over a preallocated slot cache replayed as CUDA graphs
    (one graph per batch-size and length bucket, captured on first use); false decodes
    eagerly over a cache that grows with the batch, as on the CPU."""
    attn_implementation: str = "prl_sdpa"
    """transformers attention implementation; prl_sdpa is SDPA without copying grouped K/V heads."""
    num_threads: Annotated[int, Field(ge=1)] | None = None
    """CPU threads for torch; None keeps torch's default."""
    ready_file: Path | None = None
    """Write the bound base URL (http://host:port) here once serving; $PRL_READY_FILE when unset."""
    mask_top_k: Annotated[int, Field(ge=1)] | None = 256
    """top_k injected into /inference/v1/generate requests that truncate with top_p alone, so
    each token's sampling mask (shipped to the trainer) holds at most this many ids; None
    injects none (a flat distribution then keeps most of the vocabulary per token)."""
    return_routed_experts: bool = False
    """Record, for an MoE model, the experts each completion token was routed to and return
    them with every completion of /inference/v1/generate (``routed_experts``); prl rl turns
    it on when trainer.model.routing_replay is set (docs/moe.md)."""


class TorchBackend(InferenceBackend):
    """OpenAI-compatible server with token-in/token-out generate and weight updates."""

    type = "torch"
    is_default = True
    Config = TorchInferenceConfig

    def serve(self) -> None:
        cfg = self.config
        api_key = admin_api_key(cfg.server)
        setup_logging(cfg.log)
        sock = bind(cfg.server.host, cfg.server.port)
        from prl_inference_torch.loading import load_state

        state = load_state(cfg, api_key)
        try:
            _run_uvicorn(state, sock, cfg)
        finally:
            state.engine.shutdown()


def _run_uvicorn(state, sock: socket.socket, cfg) -> None:
    import uvicorn

    from prl_inference_torch.server import build_app

    ready = ready_file(cfg)

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            announce(sock, ready)

        async def shutdown(self, sockets=None) -> None:
            state.stopping = True  # admin waits answer 503 now instead of holding the exit
            await super().shutdown(sockets=sockets)

    config = uvicorn.Config(
        build_app(state),
        log_level=cfg.log.level,
        access_log=cfg.log.level == "debug",
        timeout_keep_alive=30,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    Server(config).run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    """``python -m prl_inference_torch <resolved inference.json>``: serve one resolved config."""
    return serve_main(argv, "prl_inference_torch", TorchBackend)
