"""The RL orchestrator (torch-free): dispatch, scoring, off-policy control, packing, shipping.

``run_orchestrator(config, run_dir)`` builds the train sources (:class:`prl.envs.EnvSource`),
the inference client, the renderer, the weight transport's consumer side and the monitors
from a resolved :class:`prl.config.components.OrchestratorConfig`, then runs
:class:`prl.orchestrator.loop.Orchestrator` until ``max_steps`` batches are shipped.
The trainer reads batches with :func:`prl.orchestrator.transport.read_batch`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("prl.orchestrator")


def build_client(config: Any) -> Any:
    """The inference client for ``config.client`` (prl.client)."""
    from prl import client as client_mod

    return client_mod.InferenceClient.from_config(config.client, model=config.model.name)


def build_renderer(config: Any) -> Any:
    from prl.plugins import get_registry

    tokenizer = config.tokenizer.name or config.model.name
    return get_registry().get("renderers", config.renderer.name)(config.renderer, tokenizer)


def build_weight_consumer(config: Any, run_dir: Path) -> Any:
    from prl.plugins import get_registry

    cls = get_registry().get("weight_transports", config.weight_broadcast.type)
    return cls(config.weight_broadcast, run_dir)


def build_sources(config: Any, run_dir: Path) -> list:
    from prl.envs.source import EnvSource
    from prl.orchestrator.sources import resolve_source

    attempt = os.environ.get("PRL_ATTEMPT_CONFIG_DIR")
    out = []
    for source in config.train.source:
        env = EnvSource(source, "train", run_dir, attempt_config_dir=Path(attempt) if attempt else None)
        out.append(resolve_source(config.train, source, env))
    return out


def run_orchestrator(config: Any, run_dir: Path) -> int:
    """Run the orchestrator of ``config`` in ``run_dir``; returns the exit code."""
    from prl.orchestrator.loop import Orchestrator
    from prl.orchestrator.metrics import build_monitors

    if not logging.getLogger().handlers:
        logging.basicConfig(level=config.log.level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    orchestrator = Orchestrator(
        config,
        run_dir,
        sources=build_sources(config, run_dir),
        client=build_client(config),
        renderer=build_renderer(config),
        weights=build_weight_consumer(config, run_dir),
        monitors=build_monitors(config, run_dir),
    )
    return asyncio.run(orchestrator.run())


__all__ = ["run_orchestrator"]
