"""Build the orchestrator's parts from a resolved config and run it (see :mod:`prl.orchestrator`)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from prl.logs import setup_logging

if TYPE_CHECKING:
    from prl.client import InferenceHTTPClient
    from prl.config.components import OrchestratorConfig
    from prl.contracts import Monitor, Renderer, WeightTransport
    from prl.orchestrator.evals import OnlineEval
    from prl.orchestrator.sources import TrainSource

log = logging.getLogger("prl.orchestrator")


def build_client(config: OrchestratorConfig) -> InferenceHTTPClient:
    """The inference client for ``config.client`` (prl.client)."""
    from prl.client import InferenceHTTPClient

    # A LoRA run samples from its adapter: every request names it as the model. `prl eval`
    # shares this client with a plain [model] (no lora field): it asks for the model by name.
    lora = getattr(config.model, "lora", None)
    return InferenceHTTPClient.from_config(config.client, model=lora.name if lora else config.model.name)


def build_renderer(config: OrchestratorConfig) -> Renderer:
    return config.renderer.build(tokenizer=config.tokenizer.name or config.model.name)


def build_weight_consumer(config: OrchestratorConfig, run_dir: Path) -> WeightTransport:
    return config.weight_broadcast.build(run_dir=run_dir)


def build_sources(config: OrchestratorConfig, run_dir: Path) -> list[TrainSource]:
    from prl.envs.source import EnvSource
    from prl.orchestrator.sources import resolve_source

    attempt = os.environ.get("PRL_ATTEMPT_CONFIG_DIR")
    out = []
    for source in config.train.source:
        env = EnvSource(source, "train", run_dir, attempt_config_dir=Path(attempt) if attempt else None)
        out.append(resolve_source(config.train, source, env))
    return out


def build_evaluator(
    config: OrchestratorConfig,
    run_dir: Path,
    client: InferenceHTTPClient,
    renderer: Renderer,
    monitors: list[Monitor],
) -> OnlineEval | None:
    """Online evaluation over ``config.eval.source`` (None when there is none)."""
    if config.eval is None or not config.eval.source:
        return None
    from prl.envs.source import EnvSource
    from prl.orchestrator.evals import OnlineEval

    attempt = os.environ.get("PRL_ATTEMPT_CONFIG_DIR")
    attempt_dir = Path(attempt) if attempt else None
    envs = {s.name: EnvSource(s, "eval", run_dir, attempt_config_dir=attempt_dir) for s in config.eval.source}
    return OnlineEval(config.eval, envs, client, renderer, monitors, config.concurrency.max_inflight)


def run_orchestrator(config: OrchestratorConfig, run_dir: Path) -> int:
    """Run the orchestrator of ``config`` in ``run_dir``; returns the exit code."""
    from prl.contracts.monitor import build_monitors
    from prl.orchestrator.loop import Orchestrator

    setup_logging(config.log)
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
