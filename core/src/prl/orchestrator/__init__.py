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
    from prl.client import InferenceHTTPClient

    return InferenceHTTPClient.from_config(config.client, model=config.model.name)


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


def build_evaluator(config: Any, run_dir: Path, client: Any, renderer: Any, monitors: list) -> Any:
    """Online evaluation over ``config.eval.source`` (None when there is none)."""
    if config.eval is None or not config.eval.source:
        return None
    from prl.envs.source import EnvSource
    from prl.orchestrator.evals import OnlineEval

    attempt = os.environ.get("PRL_ATTEMPT_CONFIG_DIR")
    attempt_dir = Path(attempt) if attempt else None
    envs = {s.name: EnvSource(s, "eval", run_dir, attempt_config_dir=attempt_dir) for s in config.eval.source}
    return OnlineEval(config.eval, envs, client, renderer, monitors, config.concurrency.max_inflight)


def run_orchestrator(config: Any, run_dir: Path) -> int:
    """Run the orchestrator of ``config`` in ``run_dir``; returns the exit code."""
    from prl.contracts.monitor import build_monitors
    from prl.orchestrator.loop import Orchestrator

    if not logging.getLogger().handlers:
        logging.basicConfig(level=config.log.level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request drowns the log
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    client, renderer, monitors = build_client(config), build_renderer(config), build_monitors(config, run_dir, "orch")
    orchestrator = Orchestrator(
        config,
        run_dir,
        sources=build_sources(config, run_dir),
        client=client,
        renderer=renderer,
        weights=build_weight_consumer(config, run_dir),
        monitors=monitors,
        evaluator=build_evaluator(config, run_dir, client, renderer, monitors),
    )
    return asyncio.run(orchestrator.run())


__all__ = ["run_orchestrator"]
