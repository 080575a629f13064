"""``prl export``, ``prl convert to-fp8|to-bf16``, ``prl replay`` and ``prl data reverse-text``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def export_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoints/step_N directory.")],
    out: Annotated[
        Path | None,
        typer.Argument(help="Output directory (default: <checkpoint>/weights, or <checkpoint>/weights-FP8 for fp8)."),
    ] = None,
    dtype: Annotated[
        str, typer.Option(help="Weight dtype: bfloat16, float32, or fp8 (blockwise 128x128 e4m3, as vLLM loads).")
    ] = "bfloat16",
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

    if dtype not in ("bfloat16", "float32", "fp8"):
        raise typer.BadParameter(f"--dtype must be bfloat16, float32 or fp8, got '{dtype}'")
    try:
        path = export_checkpoint(checkpoint, out, dtype, num_workers, merge_lora=merge_lora)
    except ConfigError as exc:
        print_error(exc.message, exc.title)
        raise typer.Exit(USAGE_EXIT) from None
    except FileNotFoundError as exc:
        print_error(str(exc), "Usage error")
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


def _convert(fn, src: Path, out: Path) -> None:
    from prl.cli.errors import USAGE_EXIT, print_error
    from prl.config.errors import ConfigError

    try:
        path = fn(src, out)
    except ConfigError as exc:
        print_error(exc.message, exc.title)
        raise typer.Exit(USAGE_EXIT) from None
    typer.echo(f"converted {src} -> {path}")


def to_fp8_cmd(
    src: Annotated[Path, typer.Argument(help="A bf16 (or float32) Hugging Face model directory, e.g. a prl export.")],
    out: Annotated[Path, typer.Argument(help="Directory for the FP8 model.")],
) -> None:
    """Quantize a model directory to blockwise FP8 (128x128 e4m3 blocks, weight_scale_inv)."""
    from prl_trainer_torch.fp8_convert import bf16_to_fp8

    _convert(bf16_to_fp8, src, out)


def to_bf16_cmd(
    src: Annotated[
        Path, typer.Argument(help="A blockwise FP8 model directory (prl's, DeepSeek-V3's, Qwen3-FP8's...).")
    ],
    out: Annotated[Path, typer.Argument(help="Directory for the bf16 model.")],
) -> None:
    """Dequantize a blockwise FP8 model directory to bf16, e.g. to train from an FP8-only release."""
    from prl_trainer_torch.fp8_convert import fp8_to_bf16

    _convert(fp8_to_bf16, src, out)


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
    convert = typer.Typer(help="Convert model directories between bf16 and blockwise FP8.", no_args_is_help=True)
    convert.command("to-fp8")(to_fp8_cmd)
    convert.command("to-bf16")(to_bf16_cmd)
    app.add_typer(convert, name="convert")
    data = typer.Typer(help="Make datasets.", no_args_is_help=True)
    data.command("reverse-text")(reverse_text_cmd)
    app.add_typer(data, name="data")
