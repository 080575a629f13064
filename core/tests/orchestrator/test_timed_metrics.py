"""Time-keyed orchestrator rows: every few seconds a ``step: null`` row with the dispatcher,
concurrency and inference state, and the event loop's lag measured by a sleep-drift probe."""

import asyncio
import time
from types import SimpleNamespace

from prl.orchestrator.concurrency import AdaptiveConcurrency
from prl.orchestrator.timed import TimedMetrics


class Sink:
    def __init__(self):
        self.rows = []

    def log(self, metrics, step):
        self.rows.append((step, dict(metrics)))


def _orch():
    client = SimpleNamespace(in_flight=3, requests=0, request_seconds=0.0)
    return SimpleNamespace(
        client=client,
        inflight={object(): 0, object(): 0},
        inflight_episodes=4,
        buffer=SimpleNamespace(count=5),
        groups_dispatched=0,
        concurrency=AdaptiveConcurrency(2, 8),
        follower=SimpleNamespace(version=7),
    )


def test_rows_carry_no_step_and_report_state_and_counts_since_the_last_row():
    orch, sink = _orch(), Sink()
    timed = TimedMetrics(orch, [sink], every_s=0.2)

    async def main():
        timed.start()
        await asyncio.sleep(0.05)
        orch.client.requests, orch.client.request_seconds = 4, 2.0  # four requests, 0.5 s each
        orch.groups_dispatched = 6
        time.sleep(0.15)  # a callback blocking the loop: the probe's sleep wakes up late
        await asyncio.sleep(0.3)
        await timed.stop()

    asyncio.run(main())
    assert sink.rows, "no time-keyed row within 0.35 s at every_s = 0.2"
    step, row = sink.rows[0]
    assert step is None
    assert row["inference/in_flight"] == 3 and row["inference/requests"] == 4
    assert row["inference/latency_mean"] == 0.5 and row["inference/policy_version"] == 7
    assert row["dispatcher/in_flight_groups"] == 2 and row["dispatcher/in_flight_episodes"] == 4
    assert row["dispatcher/buffered_traces"] == 5 and row["dispatcher/dispatched"] == 6
    assert row["concurrency/limit"] == 2 and row["concurrency/in_flight"] == 4
    assert row["event_loop_lag/max"] >= 0.1  # the 0.15 s block, less the probe's own sleep
    assert 0 <= row["event_loop_lag/mean"] <= row["event_loop_lag/max"]


def test_without_monitors_nothing_runs():
    timed = TimedMetrics(_orch(), [], every_s=0.01)

    async def main():
        timed.start()
        await asyncio.sleep(0.05)
        await timed.stop()

    asyncio.run(main())
    assert timed.probe.lags == []


def test_a_run_shorter_than_the_interval_still_leaves_its_row_at_stop():
    orch, sink = _orch(), Sink()
    timed = TimedMetrics(orch, [sink], every_s=60.0)

    async def main():
        timed.start()
        orch.client.requests, orch.client.request_seconds = 2, 1.0
        await asyncio.sleep(0.05)
        await timed.stop()
        await timed.stop()  # a second stop writes nothing more

    asyncio.run(main())
    assert [(step, row["inference/requests"]) for step, row in sink.rows] == [(None, 2)]
