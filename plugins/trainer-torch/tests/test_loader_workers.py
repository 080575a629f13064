"""data.num_workers without a tokenizer, fast: 0 renders between steps only what they take,
1 renders at most two steps ahead in one thread, 2 renders in two worker processes; every
count gives the same rows, and closing the loader leaves no thread or process behind. Also
the loader's give-up on a dataset with nothing to train, and a step after close."""

from __future__ import annotations

import json
import multiprocessing as mp
import threading
import time

import pytest
from prl_trainer_torch.data import Sample
from prl_trainer_torch.loader import SampleSource, SFTLoader

from prl.config.errors import DataError
from prl.config.roots import SFTDataConfig


def cfg(**kw) -> SFTDataConfig:
    # 8-token rows: every sample below fills a row of its own.
    base = {"name": "unused", "seq_len": 8, "micro_batch_size": 1, "batch_size": 2, "num_workers": 0}
    return SFTDataConfig(**{**base, **kw})


def rendering(before: tuple[set, set]) -> tuple[list[str], list[str]]:
    """Names of the data worker processes and rendering threads alive now that were not
    alive ``before`` (another test's loader may still be winding down)."""
    procs = sorted(p.name for p in mp.active_children() if p.name.startswith("prl-data") and p not in before[0])
    threads = sorted(t.name for t in threading.enumerate() if t.name == "prl-data" and t not in before[1])
    return procs, threads


def alive() -> tuple[set, set]:
    return set(mp.active_children()), set(threading.enumerate())


def first_ids(step) -> list[int]:
    return [int(r.input_ids[0]) for r in step.rows]


class Counting:
    """Epoch e: ``n`` samples of 8 tokens (ids 100e + i), counting how many were drawn."""

    def __init__(self, n: int) -> None:
        self.n, self.drawn, self.epochs = n, 0, []

    def epoch(self, epoch: int, workers: int = 0):
        self.epochs.append(epoch)
        for i in range(self.n):
            self.drawn += 1
            yield Sample([100 * epoch + i] * 8, [0] * 8, [True] * 8)


def settled(source: Counting, want: int) -> int:
    """Samples drawn once the producer has had time to reach ``want`` and to go past it."""
    deadline = time.monotonic() + 10
    while source.drawn < want and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # three of ahead()'s 0.1 s put retries: it would have drawn more by now
    return source.drawn


def test_no_workers_render_only_what_the_step_takes_in_this_thread():
    source, before = Counting(100), alive()
    ld = SFTLoader(source, cfg(num_workers=0), 0, 1)
    assert first_ids(ld.next_step()) == [0, 1]
    assert rendering(before) == ([], [])
    # Two rows, and packing reads one sample past a row to know the row is full.
    assert settled(source, 3) == 3
    ld.close()


def test_one_worker_renders_two_steps_ahead_in_a_thread_and_close_stops_it():
    source, before = Counting(100), alive()
    ld = SFTLoader(source, cfg(num_workers=1, batch_size=3), 0, 1)
    assert first_ids(ld.next_step()) == [0, 1, 2]
    assert rendering(before) == ([], ["prl-data"])
    # The step's 3 rows, 6 more queued (two steps of 3), one waiting for room in the queue,
    # and packing's one sample of look-ahead.
    assert settled(source, 11) == 11
    ld.close()
    assert rendering(before) == ([], [])
    assert first_ids(ld.next_step()) == [3, 4, 5]  # a closed loader goes on from its cursor
    ld.close()


def test_a_dataset_with_nothing_to_train_is_read_twice_then_refused():
    source = Counting(0)
    ld = SFTLoader(source, cfg(), 0, 1)
    with pytest.raises(DataError) as err:
        ld.next_step()
    # The epoch at the cursor (it may resume at its end), then one whole epoch: no more.
    assert source.epochs == [0, 1]
    assert str(err.value) == "data: the dataset yields no trainable samples (every row is empty or masked)"


class _Bytes:
    """Renders a row without a tokenizer: the prompt's bytes, every target trained; a
    prompt under two bytes has nothing to train (None, as RowRenderer returns)."""

    def sample(self, row: dict, index: int, seq_len: int) -> Sample | None:
        ids = list(row["prompt"].encode())[: seq_len + 1]
        if len(ids) < 2:
            return None
        return Sample(ids[:-1], ids[1:], [True] * (len(ids) - 1))


class ByteSource(SampleSource):
    """A dataset source rendering with :class:`_Bytes`. Module-level: a spawned worker
    rebuilds it from ``type(self)`` and ``self.args`` by name."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.renderer = _Bytes()


def test_each_worker_count_steps_alike_rendering_where_it_says_and_close_stops_it(tmp_path):
    # 1400 rows: each of two workers' 700 outgrow its queue (512), so both are still
    # rendering while the first steps train. Every 7th prompt is one byte, a row to drop.
    rows = [{"prompt": "x" if i % 7 == 3 else f"row {i}!", "completion": ""} for i in range(1400)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    where = {0: ([], []), 1: ([], ["prl-data"]), 2: (["prl-data-0", "prl-data-1"], ["prl-data"])}
    before, streams = alive(), {}
    for workers in (0, 1, 2):
        data = cfg(name=str(tmp_path / "d.jsonl"), seed=5, num_workers=workers)
        ld = SFTLoader(ByteSource(data, None, "unused"), data, 0, 1)
        ld.load_state_dict({"epoch": 1, "rows": 3})  # epoch 1 shuffles with seed 6
        streams[workers] = [[r.input_ids.tolist() for r in ld.next_step().rows] for _ in range(3)]
        # 0: inline; 1: one thread, no process; 2: two worker processes feeding the thread.
        assert rendering(before) == where[workers]
        ld.close()
        assert rendering(before) == ([], [])  # at once, not once the epoch is rendered
    assert streams[0] == streams[1] == streams[2]
    assert len({tuple(row) for step in streams[0] for row in step}) == 6
