"""The ``wandb`` monitor (off by default; turn on with ``[monitors.wandb]``).

Each producer (orch, trainer, eval) logs to its own W&B run. The runs share the display
name and group (both default to the prl run name) and differ by ``job_type``, so the W&B UI
shows one group per prl run with one line per process. A run's id is derived from the run
directory and the producer, so a resumed process (``--resume``) continues the same W&B run
instead of starting a new one.

The online-eval process of ``prl sft`` is the exception: its ``eval/*`` rows belong beside
the trainer's ``loss/*`` on one chart, so it writes into the trainer's run (same id). Online,
both processes use W&B's ``shared`` mode (the trainer primary, online-eval labelled as a
secondary writer that does not finish the run); offline, each process keeps its own run
directory under ``monitors/wandb/<producer>``, and ``wandb sync`` merges the two files
into the one run because they carry the same id.

Metrics are plotted against prl's step (``define_metric("*", step_metric="step")``), not
W&B's own call counter, so rows from different processes and rows logged twice per step
line up. Rows without a step (``inference/*``, ...) are logged without one. Episodes are
logged as a table (``rollouts/<kind>``) of their summary columns when ``log_traces`` is on.

``mode`` picks online / offline / disabled; unset, W&B's own ``WANDB_MODE`` decides
(tests use ``WANDB_MODE=offline``). Files go to ``<run_dir>/monitors/wandb``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from prl.contracts.monitor import Monitor, MonitorConfig

# Producers that write into the trainer's W&B run rather than one of their own.
SHARES_TRAINER_RUN = frozenset({"online-eval"})
COLUMNS = ["step", "id", "env", "reward", "advantage", "tokens", "turns", "stop_condition", "completion"]


class WandbMonitor(Monitor):
    """Logs metric rows and episode tables to a W&B run per producer."""

    key: ClassVar[str] = "wandb"
    enabled_by_default: ClassVar[bool] = False
    run_wide: ClassVar[tuple[str, ...] | None] = ("project",)

    class Config(MonitorConfig):
        """``[monitors.wandb]``."""

        project: str = "prl"
        """W&B project."""
        entity: str | None = None
        """W&B entity (team or user); None uses your default."""
        name: str | None = None
        """Run display name; None uses the prl run name."""
        group: str | None = None
        """Run group; None uses the run name, so every process of one prl run groups together."""
        tags: list[str] = []
        """Run tags."""
        mode: Literal["online", "offline", "disabled"] | None = None
        """W&B mode; None leaves it to WANDB_MODE (default online)."""
        log_traces: bool = True
        """Log finished episodes as a table."""
        max_trace_rows: Annotated[int, Field(ge=1)] = 64
        """Most episodes per logged table."""

    config: Config

    def __init__(self, config: Config, run_dir: Path, producer: str, run_name: str = "") -> None:
        super().__init__(config, run_dir, producer, run_name)
        import wandb

        self._wandb = wandb
        name = config.name or run_name or self.run_dir.name
        shared = producer in SHARES_TRAINER_RUN
        wandb_dir = self.run_dir / "monitors" / "wandb"
        if shared:  # two processes in one offline dir would write the same run-<id>.wandb file
            wandb_dir = wandb_dir / producer
        wandb_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=config.project,
            entity=config.entity,
            name=name,
            group=config.group or name,
            job_type="trainer" if shared else producer,
            tags=config.tags or None,
            id=run_id(self.run_dir, producer),
            resume="allow",
            dir=str(wandb_dir),
            **_mode(wandb, producer, config.mode),
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, metrics: dict[str, float], step: int | None) -> None:
        row = {k: _plain(v) for k, v in metrics.items()}
        if step is not None:
            row["step"] = step
        self.run.log(row)

    def log_traces(self, traces: list[dict[str, Any]], step: int | None) -> None:
        if not self.config.log_traces or not traces:
            return
        by_kind: dict[str, list[list[Any]]] = {}
        for trace in traces[: self.config.max_trace_rows]:
            by_kind.setdefault(trace.get("kind", "train"), []).append(trace_row(trace, step))
        row: dict[str, Any] = {
            f"rollouts/{kind}": self._wandb.Table(columns=COLUMNS, data=rows) for kind, rows in by_kind.items()
        }
        if step is not None:
            row["step"] = step
        self.run.log(row)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def run_id(run_dir: Path, producer: str) -> str:
    """Stable W&B run id for one producer of one run directory (online-eval: the trainer's)."""
    producer = "trainer" if producer in SHARES_TRAINER_RUN else producer
    digest = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:12]
    return f"prl-{digest}-{producer}"


def _mode(wandb: Any, producer: str, mode: str | None) -> dict[str, Any]:
    """``mode`` and ``settings`` for ``wandb.init``. Online, the trainer's run is opened in
    ``shared`` mode (the trainer primary) so online-eval can write into it as a secondary
    that leaves finishing to the trainer; offline runs cannot be shared (module docstring)."""
    online = (mode or os.environ.get("WANDB_MODE") or "online") in ("online", "run")
    if not online or (producer != "trainer" and producer not in SHARES_TRAINER_RUN):
        return {"mode": mode, "settings": wandb.Settings(console="off")}
    primary = producer == "trainer"
    settings = wandb.Settings(
        console="off", mode="shared", x_label=producer, x_primary=primary, x_update_finish_state=primary
    )
    return {"mode": None, "settings": settings}


def trace_row(trace: dict[str, Any], step: int | None) -> list[Any]:
    """One table row: the summary columns and the last assistant message."""
    branches = trace.get("branches") or []
    advantage = None
    for branch in branches:
        for adv, sampled in zip(branch.get("advantages") or [], branch.get("sampled_mask") or [], strict=False):
            if sampled:
                advantage = adv
                break
        if advantage is not None:
            break
    completion = None
    for message in reversed(trace.get("messages") or []):
        if message.get("role") == "assistant":
            completion = str(message.get("content"))
            break
    tokens = sum(len(b.get("token_ids") or []) for b in branches)
    return [
        step,
        trace.get("trace_id"),
        trace.get("env"),
        trace.get("reward"),
        advantage,
        tokens,
        trace.get("turns"),
        trace.get("stop_condition"),
        completion,
    ]


def _plain(value: Any) -> Any:
    """0-d tensors and numpy scalars as Python numbers."""
    return value.item() if hasattr(value, "item") else value
