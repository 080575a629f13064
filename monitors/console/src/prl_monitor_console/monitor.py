"""The ``console`` monitor: one status line per step, on by default.

    Step 12 | orch | Time 3.21s | Reward 0.5000 | Seq. Length 118.0 | Off-policy 2

Each field is shown only when the row has one of its metric names (the first found wins),
so the trainer and the orchestrator print different lines from the same table. A row with
none of them (the trainer's checkpoint timing) prints nothing, and neither do rows
without a step (``inference/*``, ``dispatcher/*``, ...), which arrive many times a second:
the line stays one per step. Output goes through rich, which drops colour
when the stream is not a terminal (log files stay plain text).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, ClassVar, Literal

from rich.console import Console
from rich.text import Text

from prl.contracts.monitor import Monitor, MonitorConfig

# (label, metric names tried in order, format). Formats take the float value.
FIELDS: list[tuple[str, tuple[str, ...], str]] = [
    ("Time", ("time/step",), "{:.2f}s"),
    ("Reward", ("reward/all/mean", "reward/mean", "train/agg/all/reward/mean", "reward"), "{:.4f}"),
    ("Loss", ("loss/all", "loss/mean", "loss/total", "loss"), "{:.4f}"),
    ("Entropy", ("entropy/all/mean",), "{:.4f}"),
    ("Mismatch KL", ("mismatch_kl/all/mean",), "{:.4f}"),
    ("Grad Norm", ("optim/grad_norm",), "{:.4f}"),
    ("Seq. Length", ("seq_len/all/mean", "seq_len/mean"), "{:.1f}"),
    ("Throughput", ("perf/throughput",), "{:,.0f} tok/s"),
    ("Off-policy", ("off_policy/max_steps", "off_policy/mean_steps"), "{:g}"),
    ("Eval", ("eval/all/avg@1",), "{:.4f}"),
]


class ConsoleMonitor(Monitor):
    """Prints ``Step N | ... | Reward x.xxxx | ...`` for every row that has a step."""

    key: ClassVar[str] = "console"
    enabled_by_default: ClassVar[bool] = True
    prints_steps: ClassVar[bool] = True

    class Config(MonitorConfig):
        """``[monitors.console]``."""

        stream: Literal["stdout", "stderr"] = "stdout"
        """Where the status line goes."""
        extra: list[str] = []
        """More metric names to show, labelled by their name."""

    config: Config

    def __init__(self, config: Config, run_dir: Path, producer: str, run_name: str = "") -> None:
        super().__init__(config, run_dir, producer, run_name)
        file = sys.stdout if config.stream == "stdout" else sys.stderr
        self.console = Console(file=file, highlight=False, soft_wrap=True)

    def log(self, metrics: dict[str, float], step: int | None) -> None:
        if step is None or not self._fields(metrics):
            return  # a row with nothing to show (a checkpoint's save time) is no step line
        self.console.print(self.line(metrics, step))

    def line(self, metrics: dict[str, Any], step: int) -> Text:
        """The status line for one row."""
        text = Text()
        text.append(f"Step {step}", style="bold")
        text.append(f" | {self.producer}", style="dim")
        for label, value in self._fields(metrics):
            text.append(" | ")
            text.append(f"{label} ", style="cyan")
            text.append(value)
        return text

    def _fields(self, metrics: dict[str, Any]) -> list[tuple[str, str]]:
        shown = []
        table = FIELDS + [(name, (name,), "{:.4g}") for name in self.config.extra]
        for label, names, fmt in table:
            for name in names:
                value = _finite(metrics.get(name))
                if value is not None:
                    shown.append((label, fmt.format(value)))
                    break
        # Evaluation rows (prl eval, online evals): one field per source, eval/<env>/avg@k.
        for name, raw in metrics.items():
            parts, value = name.split("/"), _finite(raw)
            per_source = len(parts) == 3 and parts[0] == "eval" and parts[1] != "all"
            if per_source and parts[2].startswith("avg@") and value is not None:
                shown.append((f"{parts[1]} {parts[2]}", f"{value:.4f}"))
        return shown


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
