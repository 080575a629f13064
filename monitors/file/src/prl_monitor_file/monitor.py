"""The ``file`` monitor (``docs/monitoring.md``), on by default.

Layout under ``<run_dir>/monitors/file`` (or ``path``)::

    metrics.jsonl                 one JSON object per row
    traces/stream/00000.jsonl     episode traces, chunked (00000.jsonl.zst once sealed with compress)
    traces/stream.index.jsonl     one summary row per episode: where to find it and its headline numbers
    annotations/<producer>/00000.jsonl, annotations/<producer>.index.jsonl
                                  per-token arrays of trace branches (prl_monitor_file.annotations)
    live/<trace_id>.jsonl, live/pending/<trace_id>.json
                                  in-flight episodes, removed when they end (prl_monitor_file.live)

A metrics row is ``{"step": <int|null>, "time": <unix s>, "<name>": <number>, ...,
"producer": "orch"|"trainer"|"eval"|"online-eval"}``. Trainer rank 0, orchestrator and eval
append to the same file, so each row is written with a single ``write`` on an ``O_APPEND``
descriptor: rows from different processes never interleave, and nothing is buffered, so
a crash loses no finished row. Readers merge rows by ``(step, producer)``; rows keyed by
time carry ``step: null``. NaN and ±inf values are dropped with a warning.

A relaunch of the run (``--resume``) appends to the same file and redoes the steps after
its checkpoint, so every row it writes carries ``"attempt": N`` (the launch's attempt
number, N > 1); :func:`prl_monitor_file.read_metrics` keeps the newest attempt's rows.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field

from prl.contracts.monitor import Monitor, MonitorConfig
from prl.fsutil import write_atomic
from prl.runs import current_attempt
from prl_monitor_file import annotations as token_notes
from prl_monitor_file.live import LiveWriter
from prl_monitor_file.records import clean_metrics
from prl_monitor_file.stream import TraceStream


class FileMonitor(Monitor):
    """Appends metric rows to ``metrics.jsonl`` and episodes to the chunked trace stream."""

    key: ClassVar[str] = "file"
    enabled_by_default: ClassVar[bool] = True

    class Config(MonitorConfig):
        """``[monitors.file]``."""

        path: Path | None = None
        """Output directory; None is <run_dir>/monitors/file, a relative path is under run_dir."""
        chunk_bytes: Annotated[int, Field(ge=1)] = 5 * 1024**3
        """Seal a trace chunk once it reaches this many bytes."""
        compress: bool = True
        """Compress sealed chunks to seekable zstd (``NNNNN.jsonl.zst``); the index's offsets
        stay those of the uncompressed chunk, and readers handle both forms."""
        float_decimals: Annotated[int, Field(ge=0)] = 4
        """Digits kept for floats in trace records."""

    config: Config

    def __init__(self, config: Config, run_dir: Path, producer: str, run_name: str = "") -> None:
        super().__init__(config, run_dir, producer, run_name)
        root = config.path if config.path is not None else Path("monitors") / "file"
        self.dir = root if root.is_absolute() else self.run_dir / root
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self._fd: int | None = os.open(self.metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        # Attempt 1 rows stay as they always were; a relaunch marks its rows so readers can
        # tell a redone step's new row from the killed attempt's.
        attempt = current_attempt()
        self.attempt = attempt if attempt is not None and attempt > 1 else None
        self._stream = TraceStream(self.dir / "traces", config.chunk_bytes, config.compress, config.float_decimals)
        self._annotations: TraceStream | None = None  # opened by the first log_annotations
        self._live = LiveWriter(self.dir / "live")

    def log_plan(self, plan: dict[str, int], step: int | None) -> None:
        """Merge ``{source: rollouts}`` into ``plan.json`` as ``{source: {step: rollouts}}``."""
        path = self.dir / "plan.json"
        merged = json.loads(path.read_text()) if path.exists() else {}
        for name, total in plan.items():
            merged.setdefault(name, {})[str(step or 0)] = total
        write_atomic(path, json.dumps(merged, indent=2))

    def log(self, metrics: dict[str, float], step: int | None) -> None:
        if self._fd is None:
            raise RuntimeError("file monitor: log() after close()")
        row: dict[str, Any] = {"step": step, "time": time.time()}
        row.update(clean_metrics(metrics))
        row["producer"] = self.producer
        if self.attempt is not None:
            row["attempt"] = self.attempt
        os.write(self._fd, (json.dumps(row, separators=(",", ":")) + "\n").encode())

    def log_traces(self, traces: list[dict[str, Any]], step: int | None) -> None:
        if traces:
            self._stream.append(traces, step)

    def log_annotations(self, records: list[dict[str, Any]], step: int | None) -> None:
        for record in records:
            token_notes.check(record)
        if not records:
            return
        if self._annotations is None:
            cfg = self.config
            root = self.dir / "annotations"
            self._annotations = TraceStream(
                root, cfg.chunk_bytes, cfg.compress, cfg.float_decimals, name=self.producer, index=token_notes.index_row
            )
        self._annotations.append(records, step)

    def log_live(self, trace_id: str, event: dict[str, Any]) -> None:
        self._live.event(trace_id, event)

    def clear_live(self) -> None:
        self._live.clear()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._stream.close()
        if self._annotations is not None:
            self._annotations.close()
