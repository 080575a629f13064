"""The ``prl model`` command group: ``prl model init --preset tiny --out DIR``.

Errors in the flags print one ``error: ...`` line to stderr and exit with status 2, the
usual status for a usage error.
"""

from __future__ import annotations

from pathlib import Path

import typer

from prl import hookimpl


def build_app() -> typer.Typer:
    """A typer group ``model`` with the ``init`` command."""
    model = typer.Typer(help="Make and inspect local models.", no_args_is_help=True)

    @model.command("init")
    def init(
        out: Path = typer.Option(..., "--out", help="Directory to write the model to (absent or empty)."),
        preset: str = typer.Option(
            "tiny",
            "--preset",
            help=(
                "Model size: tiny (~1.6M params), small (~9.6M), tiny-moe (Qwen3-MoE, 8 experts "
                "top-2, ~5.2M params, ~1.6M active), tiny-qwen3.5 (Qwen3.5 hybrid text model: 3 Gated "
                "DeltaNet layers + 1 full attention, ~1.7M), tiny-qwen3.5-vl (tiny-qwen3.5 with a 2-block vision "
                "tower and an image processor, ~2.0M), or the Qwen3 shapes qwen3-0.6b, "
                "qwen3-1.7b, qwen3-4b, qwen3-8b (random weights)."
            ),
        ),
        seed: int = typer.Option(0, "--seed", help="Seed of the random initial weights."),
        force: bool = typer.Option(False, "--force", help="Replace a non-empty --out directory."),
    ) -> None:
        """Write a random Qwen3-family model (dense, MoE, Qwen3.5 hybrid or VL) with a byte-level ChatML tokenizer."""
        from prl_model_init.build import ModelInitError, active_parameters, count_parameters, make_model

        try:
            path = make_model(out, preset=preset, seed=seed, force=force)
        except ModelInitError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        total, active = count_parameters(preset), active_parameters(preset)
        size = f"{total:,} parameters" + (f", {active:,} active per token" if active != total else "")
        typer.echo(f"wrote {preset} model ({size}, seed {seed}) to {path}")

    return model


@hookimpl
def prl_add_commands(app: typer.Typer) -> None:
    app.add_typer(build_app(), name="model")
