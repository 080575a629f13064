"""`prl dashboard` (or `prl model`) where the distribution adding it is not installed says
what to install, exit 2, instead of typer's bare "No such command"."""

from __future__ import annotations

import pytest
import typer

from prl.cli import main as cli_main


def test_a_known_command_that_is_not_installed_names_its_distribution(monkeypatch, capsys):
    monkeypatch.setattr(cli_main, "app", typer.Typer())  # nothing registered the commands
    with pytest.raises(SystemExit) as info:
        cli_main._missing_command_hint(["prl", "dashboard", "outputs"])
    assert info.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the command 'prl dashboard' is not installed; install the distribution 'prl-dashboard'" in err


def test_installed_and_unknown_commands_pass_through_to_typer(monkeypatch):
    app = typer.Typer()
    app.command("dashboard")(lambda: None)
    monkeypatch.setattr(cli_main, "app", app)
    cli_main._missing_command_hint(["prl", "dashboard"])  # registered: nothing to say
    cli_main._missing_command_hint(["prl", "nonsense"])  # unknown: typer's own error
    cli_main._missing_command_hint(["prl", "--version"])
