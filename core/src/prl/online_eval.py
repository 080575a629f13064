"""``prl online-eval``: the online-eval process of ``prl sft`` with ``[eval]`` (docs/sft.md).

It reads the run's resolved ``sft.json`` and follows the trainer's broadcast plan
(:mod:`prl.evalplan`). For each planned version ``v``, in order:

1. ``receive(v)`` through the weight transport: the consumer's half of the four-stage
   handshake in ``broadcasts/step_v`` (``.sender_ready`` -> ``.receiver_ready`` ->
   ``.started`` -> ``.finished``). The trainer goes on training once acknowledged, so an
   evaluation never holds up training except through the next handshake;
2. an evaluation of an older version still running is abandoned when
   ``eval.cancel_on_new_checkpoint`` (its numbers would describe stale weights), else
   awaited, because the server is about to change weights under it;
3. inference loads ``v`` (pause, ``/update_weights``, resume), unless it already serves it:
   a fresh run's version 0 is the base model the server started with;
4. the orchestrator's :class:`~prl.orchestrator.evals.OnlineEval` scores ``v`` in the
   background: every ``[[eval.source]]``, metrics ``eval/<env>/...`` logged at step ``v``
   with producer ``online-eval``. The start-up version is scored only on a fresh run
   without ``eval.skip_first_step``, or on resume with ``eval.retrigger_on_resume``.

The final version's evaluation always runs to the end; the process then exits 0 (1 when
that evaluation failed). Torch-free, like the orchestrator.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prl.logs import setup_logging

if TYPE_CHECKING:
    from prl.config.roots import SFTConfig
    from prl.config.sft_eval import SFTEvalConfig

log = logging.getLogger("prl.online_eval")
POLL_S = 1.0
SAY_EVERY_S = 60.0


def scores_start(config: SFTEvalConfig, start: int) -> bool:
    """Whether the start-up version ``start`` is evaluated (see the module docstring)."""
    return config.retrigger_on_resume if start > 0 else not config.skip_first_step


async def _receive(transport: Any, version: int, load: bool) -> str | None:
    """Wait for ``version`` as long as it takes: the launcher ends this process when the
    trainer dies, and a slow trainer step is not an error."""
    said = time.monotonic()
    while True:
        try:
            return await asyncio.to_thread(transport.receive, version, POLL_S, load)
        except TimeoutError:
            if time.monotonic() - said >= SAY_EVERY_S:
                said = time.monotonic()
                log.info("waiting for the trainer's weights version %d (broadcasts/step_%d)", version, version)


async def _settle(task: asyncio.Task, version: int, cancel: bool) -> bool:
    """Finish (or abandon) the evaluation of ``version``; False when it failed."""
    if cancel and not task.done():
        task.cancel()
        log.info("abandoned the evaluation of step %d: newer weights are ready", version)
    try:
        await task
    except asyncio.CancelledError:
        return True
    except Exception as exc:  # noqa: BLE001 - one failed eval must not stop the run
        log.error("evaluation of step %d failed: %s: %s", version, type(exc).__name__, exc)
        return False
    return True


async def follow(config: SFTConfig, run_dir: Path, evaluator: Any, client: Any, transport: Any) -> int:
    """Receive, load and evaluate every planned version (steps 1-4 of the module docstring)."""
    from prl.evalplan import read_plan
    from prl.orchestrator.weights import load_version

    plan = await asyncio.to_thread(read_plan, run_dir, config.weight_broadcast.timeout)
    start = plan["start"]
    served = 0 if start == 0 else None
    running: tuple[int, asyncio.Task] | None = None
    for version in plan["versions"]:
        weight_dir = await _receive(transport, version, load=version != served)
        if running is not None:
            await _settle(running[1], running[0], config.eval.cancel_on_new_checkpoint)
            running = None
        if version != served:
            await load_version(client, weight_dir, version)
            served = version
        if version != start or scores_start(config.eval, start):
            running = (version, asyncio.create_task(evaluator.run(version), name=f"eval-{version}"))
    if running is not None and not await _settle(running[1], running[0], cancel=False):
        return 1
    return 0


async def _main(config: SFTConfig, run_dir: Path) -> int:
    from prl.client import InferenceHTTPClient
    from prl.contracts.monitor import build_monitors
    from prl.envs.source import EnvSource
    from prl.orchestrator.evals import OnlineEval

    ev = config.eval
    client = InferenceHTTPClient.from_config(ev.client, model=config.model.name)
    renderer = config.renderer.build(tokenizer=config.tokenizer.name or config.model.name)
    monitors = build_monitors(config, run_dir, "online-eval")
    attempt = os.environ.get("PRL_ATTEMPT_CONFIG_DIR")
    attempt_dir = Path(attempt) if attempt else None
    envs = {s.name: EnvSource(s, "eval", run_dir, attempt_config_dir=attempt_dir) for s in ev.source}
    evaluator = OnlineEval(ev, envs, client, renderer, monitors, ev.concurrency.max_inflight)
    try:
        log.info("waiting for inference at %s", ev.client.base_url)
        await client.wait_ready(timeout=ev.client.timeout)
        await evaluator.start()
        transport = config.weight_broadcast.build(run_dir=run_dir)
        await transport.connect(client)
        return await follow(config, run_dir, evaluator, client, transport)
    finally:
        await evaluator.close()
        for monitor in monitors:
            monitor.close()
        await client.aclose()


def run_online_eval(config: SFTConfig, run_dir: Path) -> int:
    """Evaluate the versions the SFT trainer of ``run_dir`` broadcasts; returns the exit code."""
    if config.eval is None:
        from prl.config.errors import ConfigError

        raise ConfigError("eval: prl online-eval needs an [eval] section with [[eval.source]] blocks")
    setup_logging(config.log)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request drowns the log
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return asyncio.run(_main(config, run_dir))
