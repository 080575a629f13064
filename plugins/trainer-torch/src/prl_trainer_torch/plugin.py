"""Entry point of prl-trainer-torch: the ``torch`` trainer and the ``export``, ``replay`` and ``data`` commands."""

from __future__ import annotations

from prl import hookimpl


@hookimpl
def prl_register_trainers():
    from prl_trainer_torch.trainer import TorchTrainer

    return [TorchTrainer]


@hookimpl
def prl_add_commands(app) -> None:
    from prl_trainer_torch.cli import add_commands

    add_commands(app)
