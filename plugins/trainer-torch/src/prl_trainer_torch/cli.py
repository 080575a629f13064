"""``prl export``, ``prl replay`` and ``prl data reverse-text``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def export_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoints/step_N directory.")],
    out: Annotated[Path | None, typer.Argument(help="Output directory (default: <checkpoint>/weights).")] = None,
    dtype: Annotated[str, typer.Option(help="Weight dtype: bfloat16 or float32.")] = "bfloat16",
    num_workers: Annotated[
        int, typer.Option(min=1, help="torchrun ranks sharing the model, for a checkpoint too large for one process.")
    ] = 1,
    merge_lora: Annotated[
        bool, typer.Option("--merge-lora", help="Merge a LoRA checkpoint's adapter into the base model's weights.")
    ] = False,
) -> None:
    """Convert a DCP trainer checkpoint to a Hugging Face model directory."""
    from prl.cli.errors import USAGE_EXIT, print_error
    from prl.config.errors import ConfigError
    from prl_trainer_torch.export import export_checkpoint

    if dtype not in ("bfloat16", "float32"):
        raise typer.BadParameter(f"--dtype must be bfloat16 or float32, got '{dtype}'")
    try:
        path = export_checkpoint(checkpoint, out, dtype, num_workers, merge_lora=merge_lora)
    except ConfigError as exc:
        print_error(exc.message, exc.title)
        raise typer.Exit(USAGE_EXIT) from None
    typer.echo(f"exported {checkpoint} -> {path}")


def replay_cmd(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="A `prl rl` run directory made with trainer.enable_token_export.")],
    step: Annotated[int, typer.Option("--step", help="The step to recompute (from 1).")],
) -> None:
    """Recompute one RL step from the run's checkpoint and exported batch; compare loss, grad
    norm and weights with what the run recorded. Extra `--trainer.<path> value` flags change
    a setting for the replay. Exit 0: all equal; 1: something differs; 2: bad input."""
    from prl.cli.errors import USAGE_EXIT, print_error
    from prl.config.errors import ConfigError
    from prl_trainer_torch.step_replay import find_inputs, format_report, replay_step

    try:
        inputs = find_inputs(run_dir, step, list(ctx.args))
        report = replay_step(inputs)
    except ConfigError as exc:
        print_error(exc.message, exc.title)
        raise typer.Exit(USAGE_EXIT) from None
    for line in format_report(report):
        typer.echo(line)
    raise typer.Exit(0 if report.equal else 1)


def reverse_text_cmd(
    out: Annotated[Path, typer.Option(help="Directory for train.jsonl and val.jsonl.")] = Path("data/reverse-text"),
    train: Annotated[int, typer.Option(help="Training examples.")] = 20000,
    val: Annotated[int, typer.Option(help="Held-out examples.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
) -> None:
    """Write reverse-text SFT data (prompt/completion jsonl) with a held-out split."""
    from prl_trainer_torch.reverse_text import write_dataset

    paths = write_dataset(out, train, val, seed)
    typer.echo(" ".join(str(p) for p in paths))


def add_commands(app: typer.Typer) -> None:
    app.command("export")(export_cmd)
    # Unknown options are the replay's --trainer.<path> settings, handed over untouched.
    app.command("replay", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(replay_cmd)
    data = typer.Typer(help="Make datasets.", no_args_is_help=True)
    data.command("reverse-text")(reverse_text_cmd)
    app.add_typer(data, name="data")
