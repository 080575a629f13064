"""Registers ``prl dashboard`` with the prl CLI (the ``prl`` entry-point group)."""

from __future__ import annotations

import typer

from prl import hookimpl


@hookimpl
def prl_add_commands(app: typer.Typer) -> None:
    @app.command(
        "dashboard",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
        add_help_option=False,
    )
    def dashboard_cmd(ctx: typer.Context) -> None:
        """Local read-only dashboard over run directories."""
        from prl_dashboard.cli import main

        raise typer.Exit(main(list(ctx.args)))
