"""prl monitor plugin ``file``: metrics.jsonl and chunked episode traces under the run dir.

This package's names are its public API for readers of those files (the dashboard): the
readers below, not the modules behind them."""

from prl_monitor_file.annotations import producers, read_annotations
from prl_monitor_file.monitor import FileMonitor
from prl_monitor_file.reader import metric_by_step, read_metrics
from prl_monitor_file.stream import read_trace

__all__ = ["FileMonitor", "metric_by_step", "producers", "read_annotations", "read_metrics", "read_trace"]
