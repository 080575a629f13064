"""The console monitor prints one plain status line per step and nothing for timed rows."""

import io

from prl_monitor_console import ConsoleMonitor

from prl.config.monitors import MonitorsSection
from prl.plugins import get_registry


def _monitor(tmp_path, producer="orch", **cfg):
    monitor = ConsoleMonitor(ConsoleMonitor.Config(**cfg), tmp_path, producer, "run")
    buf = io.StringIO()
    monitor.console.file = buf  # not a terminal: rich writes plain text
    return monitor, buf


def test_registered_and_on_by_default():
    assert get_registry().get("monitors", "console") is ConsoleMonitor
    assert isinstance(MonitorsSection(component=True).model()().console, ConsoleMonitor.Config)


def test_one_line_per_step_with_formatted_fields(tmp_path):
    monitor, buf = _monitor(tmp_path)
    monitor.log({"reward/all/mean": 0.123456, "time/step": 3.2101, "seq_len/all/mean": 118, "x": 1}, step=12)
    monitor.log({"loss/all": 0.5, "perf/throughput": 12345.6, "optim/grad_norm": float("nan")}, step=13)
    lines = buf.getvalue().splitlines()
    assert lines == [
        "Step 12 | orch | Time 3.21s | Reward 0.1235 | Seq. Length 118.0",
        "Step 13 | orch | Loss 0.5000 | Throughput 12,346 tok/s",
    ]


def test_rows_without_step_print_nothing(tmp_path):
    monitor, buf = _monitor(tmp_path)
    monitor.log({"inference/queue": 4.0}, step=None)
    assert buf.getvalue() == ""


def test_extra_metrics_and_producer(tmp_path):
    monitor, buf = _monitor(tmp_path, producer="trainer", extra=["optim/lr"])
    monitor.log({"optim/lr": 1e-6}, step=1)
    assert buf.getvalue().strip() == "Step 1 | trainer | optim/lr 1e-06"


def test_sft_loss_shows_and_a_row_with_nothing_to_show_prints_nothing(tmp_path):
    monitor, buf = _monitor(tmp_path, producer="trainer")
    monitor.log({"loss/mean": 5.46938, "time/step": 1.5}, step=3)
    monitor.log({"time/save_ckpt": 0.27}, step=3)
    assert buf.getvalue().splitlines() == ["Step 3 | trainer | Time 1.50s | Loss 5.4694"]
