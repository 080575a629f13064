"""The ``vllm`` inference backend: vLLM's OpenAI server plus prl's token and admin routes.

``Backend(cfg).serve()`` binds ``server.host:port`` first (port 0 takes a free port, so
nothing can steal it while the engine starts), builds vLLM's arguments from the config
(:func:`prl_inference_vllm.config.vllm_argv`), starts the engine (``AsyncLLM``, with its
engine core and workers in child processes), builds vLLM's FastAPI app, puts prl's routes
ahead of vLLM's (:mod:`prl_inference_vllm.routes`) and serves until SIGINT/SIGTERM. Once
it accepts connections it prints ``listening on http://host:port`` and, when
``backend.ready_file`` (or ``$PRL_READY_FILE``) names a file, writes that URL there
atomically.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prl.contracts import InferenceBackend
from prl.logs import setup_logging
from prl.serving import SHUTDOWN_GRACE_S, admin_api_key, announce, bind, ready_file, serve_main
from prl_inference_vllm.config import VllmInferenceConfig, lora_enabled, vllm_argv

if TYPE_CHECKING:
    from prl.config.components import InferenceConfig

log = logging.getLogger("prl_inference_vllm")


class VllmArgsError(ValueError):
    """vLLM rejected the arguments built from ``[inference.backend]``."""


def parse_vllm_args(cfg: InferenceConfig) -> Any:
    """vLLM's parsed server arguments (an ``argparse.Namespace``) for a resolved config."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="prl inference (vllm)"))

    def fail(message: str) -> None:
        raise VllmArgsError(f"[inference.backend] (vllm): {message}")

    parser.error = fail  # type: ignore[method-assign]
    args = parser.parse_args(vllm_argv(cfg))
    validate_parsed_serve_args(args)
    return args


class VllmBackend(InferenceBackend):
    """vLLM OpenAI-compatible server with /inference/v1/generate and weight updates."""

    type = "vllm"
    Config = VllmInferenceConfig

    def serve(self) -> None:
        cfg = self.config
        api_key = admin_api_key(cfg.server)
        setup_logging(cfg.log)
        try:
            args = parse_vllm_args(cfg)
        except VllmArgsError as exc:
            raise SystemExit(str(exc)) from None
        sock = bind(cfg.server.host, cfg.server.port)
        args.port = sock.getsockname()[1]
        import uvloop

        uvloop.run(_serve(cfg, args, sock, api_key))


def _served_checkpoint(model_dir: str) -> tuple[dict[str, Any], dict[str, list[int]] | None]:
    from prl_inference_vllm.weights import checkpoint_shapes

    path = Path(model_dir) / "config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    return config, checkpoint_shapes(model_dir)


async def _serve(cfg: InferenceConfig, args: Any, sock: socket.socket, api_key: str | None) -> None:
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state
    from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.launcher import serve_http

    from prl_inference_vllm.routes import PrlState, install

    async with build_async_engine_client(args) as engine:
        tasks = await engine.get_supported_tasks()
        model_config = engine.model_config
        app = build_app(args, tasks, model_config)
        await init_app_state(engine, app.state, args, tasks)
        served_config, served_shapes = _served_checkpoint(model_config.model)
        if not served_config:
            served_config = model_config.hf_config.to_dict()
        state = PrlState(
            engine=engine,
            model_name=cfg.model.name,
            max_model_len=model_config.max_model_len,
            vocab_size=model_config.get_vocab_size(),
            max_logprobs=model_config.max_logprobs,
            served_config=served_config,
            served_shapes=served_shapes,
            api_key=api_key,
            lora_enabled=lora_enabled(cfg),
            limits=cfg.server.limits,
            admin_timeout=cfg.server.admin_timeout,
        )
        install(app, state)
        await engine.update_weight_version("0")
        ready = asyncio.create_task(_announce(app, sock, ready_file(cfg)))
        shutdown = await serve_http(
            app,
            sock=sock,
            host=args.host,
            port=args.port,
            log_level=args.uvicorn_log_level,
            access_log=cfg.log.level == "debug",
            timeout_keep_alive=30,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,  # requests in flight do not hold a SIGTERM
        )
        ready.cancel()
    await shutdown
    sock.close()


async def _announce(app: Any, sock: socket.socket, ready: str | os.PathLike | None) -> None:
    """Print the URL and write the ready file once uvicorn accepts connections."""
    while not getattr(getattr(app.state, "server", None), "started", False):
        await asyncio.sleep(0.05)
    announce(sock, ready)


def main(argv: list[str] | None = None) -> int:
    """``python -m prl_inference_vllm <resolved inference.json>``: serve one resolved config."""
    return serve_main(argv, "prl_inference_vllm", VllmBackend)
