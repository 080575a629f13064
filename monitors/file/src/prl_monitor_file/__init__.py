"""prl monitor plugin ``file``: metrics.jsonl and chunked episode traces under the run dir."""

from prl_monitor_file.annotations import read_annotations
from prl_monitor_file.monitor import FileMonitor
from prl_monitor_file.reader import metric_by_step, read_metrics
from prl_monitor_file.stream import read_trace

__all__ = ["FileMonitor", "metric_by_step", "read_annotations", "read_metrics", "read_trace"]
