"""Filesystem rollout transport, curriculum samplers, adaptive concurrency."""

from __future__ import annotations

import os
import threading
import time

import pytest

from prl.contracts import Task
from prl.orchestrator import transport
from prl.orchestrator.concurrency import AdaptiveConcurrency
from prl.orchestrator.sampler import make_sampler


def test_round_trip_per_rank(tmp_path):
    ranks = [[{"input_ids": [1, 2], "env_names": ["a"], "advantages": [0.25, -1.5]}], [{"input_ids": [3]}]]
    transport.write_batch(tmp_path, 7, ranks)
    assert (tmp_path / "batches" / "step_7" / "rank_1.bin").exists()
    assert transport.read_batch(tmp_path, 7, 0, timeout=1) == ranks[0]
    assert transport.read_batch(tmp_path, 7, 1, timeout=1) == ranks[1]


def test_read_waits_for_the_writer(tmp_path):
    threading.Timer(0.2, transport.write_batch, (tmp_path, 1, [[{"input_ids": [5]}]])).start()
    started = time.monotonic()
    assert transport.read_batch(tmp_path, 1, 0, timeout=5) == [{"input_ids": [5]}]
    assert time.monotonic() - started >= 0.15


def test_timeout_names_what_it_waits_for(tmp_path):
    transport.write_batch(tmp_path, 2, [[{}]])
    with pytest.raises(TimeoutError, match=r"batch step 3 rank 0 .*step_3/rank_0.bin \(newest shipped: step_2\)"):
        transport.read_batch(tmp_path, 3, 0, timeout=0.2)


def test_a_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        transport.write_batch(tmp_path, 1, [[{"input_ids": list(range(1000))}]])
    assert not transport.batch_path(tmp_path, 1, 0).exists()


def test_reader_never_sees_a_partial_file(tmp_path):
    big = [[{"input_ids": list(range(200_000))}]]
    errors = []

    def reader():
        try:
            for step in range(1, 6):
                assert transport.read_batch(tmp_path, step, 0, timeout=20, poll=0.001) == big[0]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    for step in range(1, 6):
        transport.write_batch(tmp_path, step, big)
    t.join(30)
    assert not errors


def test_prune_keeps_recent_steps(tmp_path):
    for s in range(1, 6):
        transport.write_batch(tmp_path, s, [[{}]])
    transport.prune_batches(tmp_path, 4)
    assert sorted(p.name for p in (tmp_path / "batches").iterdir()) == ["step_4", "step_5"]


def _tasks(n):
    return [Task(task_id=f"t{i}", prompt=[]) for i in range(n)]


def test_standard_sampler_shuffled_epochs():
    s = make_sampler("standard", _tasks(5), seed=3)
    first = [s.next().task_id for _ in range(5)]
    second = [s.next().task_id for _ in range(5)]
    assert sorted(first) == sorted(second) == [f"t{i}" for i in range(5)]
    assert first != second  # reshuffled per epoch
    again = make_sampler("standard", _tasks(5), seed=3)
    assert [again.next().task_id for _ in range(5)] == first


def test_difficulty_pool_skips_uninformative_tasks():
    s = make_sampler("difficulty_pool", _tasks(10), seed=0)
    for i in range(5):
        s.observe(f"t{i}", [1.0, 1.0, 1.0])
    counts = {}
    for _ in range(400):
        tid = s.next().task_id
        counts[tid] = counts.get(tid, 0) + 1
    flat = sum(counts.get(f"t{i}", 0) for i in range(5))
    assert flat < 0.5 * sum(counts.get(f"t{i}", 0) for i in range(5, 10))


def test_concurrency_grows_to_max_and_halves_on_errors():
    now = [0.0]
    c = AdaptiveConcurrency(2, 64, clock=lambda: now[0])
    for _ in range(2000):
        now[0] += 1.0 / c.limit  # throughput grows with the limit (unsaturated server)
        c.on_done()
    assert c.limit == 64
    c.on_done(failed=True)
    assert c.limit == 32
    for _ in range(10):
        c.on_done(failed=True)
    assert c.limit == 2


def test_concurrency_stops_growing_on_a_saturated_server():
    now = [0.0]
    c = AdaptiveConcurrency(1, 1024, clock=lambda: now[0])
    for _ in range(5000):
        now[0] += 1.0 / min(c.limit, 16)  # throughput flat beyond 16 in flight
        c.on_done()
    assert 16 <= c.limit <= 64


def test_orchestrator_modules_never_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, prl.orchestrator, prl.orchestrator.loop, prl.orchestrator.transport, prl.rl_launch; "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
