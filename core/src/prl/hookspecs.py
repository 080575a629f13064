"""The hooks every prl plugin implements.

This module is the only documentation of the hooks: ``docs/hooks.md`` is generated from
these docstrings and a test fails when a hook is missing there. Register-hooks return lists
of classes; core flattens them and keys each class by its tag (a ``ClassVar``). Two classes
claiming one tag is an error naming both distributions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # pragma: no cover - typing only, keeps `import prl` torch-free
    import typer

    from prl.contracts import (
        Algorithm,
        InferenceBackend,
        Launcher,
        Loss,
        Monitor,
        Renderer,
        Taskset,
        Trainer,
        WeightTransport,
    )

hookspec = pluggy.HookspecMarker("prl")


@hookspec
def prl_register_algorithms() -> list[type[Algorithm]]:
    """Register RL algorithms (advantages and per-token loss components).

    Returns:
        A list of :class:`prl.contracts.Algorithm` subclasses, each keyed by its ``type``
        ClassVar, selected with ``[orchestrator.train.algo] type = "..."``.
    """


@hookspec
def prl_register_losses() -> list[type[Loss]]:
    """Register trainer-side policy losses.

    Returns:
        A list of :class:`prl.contracts.Loss` subclasses keyed by ``type``, selected with
        ``[trainer.loss] type = "..."``. Loss classes may import torch inside their methods.
    """


@hookspec
def prl_register_renderers() -> list[type[Renderer]]:
    """Register renderers: messages to token ids with per-token role attribution.

    Returns:
        A list of :class:`prl.contracts.Renderer` subclasses keyed by ``name`` (not
        ``type``), selected with ``[renderer] name = "..."`` or ``[orchestrator.renderer]``.
    """


@hookspec
def prl_register_monitors() -> list[type[Monitor]]:
    """Register metric sinks (file, console, wandb, ...).

    Returns:
        A list of :class:`prl.contracts.Monitor` subclasses keyed by ``key``: the name of
        their optional section under ``[monitors]`` (``[monitors.file]``).
    """


@hookspec
def prl_register_weight_transports() -> list[type[WeightTransport]]:
    """Register ways to move trainer weights to inference servers.

    Returns:
        A list of :class:`prl.contracts.WeightTransport` subclasses keyed by ``type``,
        selected with ``[weight_broadcast] type = "..."``.
    """


@hookspec
def prl_register_launchers() -> list[type[Launcher]]:
    """Register launchers that start, supervise and stop the processes of a run.

    Returns:
        A list of :class:`prl.contracts.Launcher` subclasses keyed by ``type``, selected
        with ``[deployment] type = "..."`` (``local``, ``slurm``).
    """


@hookspec
def prl_register_inference_backends() -> list[type[InferenceBackend]]:
    """Register inference servers that speak the HTTP contract of ``docs/inference.md``.

    Returns:
        A list of :class:`prl.contracts.InferenceBackend` subclasses keyed by ``type``,
        selected with ``[inference.backend] type = "..."``.
    """


@hookspec
def prl_register_tasksets() -> list[type[Taskset]]:
    """Register tasksets: tasks, rollouts against an inference client, and scoring.

    Returns:
        A list of :class:`prl.contracts.Taskset` subclasses keyed by ``id``, selected with
        ``env.taskset.id = "..."`` in a source block.
    """


@hookspec
def prl_register_trainers() -> list[type[Trainer]]:
    """Register trainers that run SFT and RL steps and own checkpoints.

    Returns:
        A list of :class:`prl.contracts.Trainer` subclasses keyed by ``type``, selected
        with ``[trainer] type = "..."`` (RL) or ``trainer_type`` (SFT).
    """


@hookspec
def prl_add_commands(app: typer.Typer) -> None:
    """Add sub-commands to the ``prl`` CLI (``model``, ``export``, ``data``, ...).

    Args:
        app: the root typer application; call ``app.command(name)(fn)`` or
            ``app.add_typer(sub, name=...)``. A command name already taken is an error.
    """
