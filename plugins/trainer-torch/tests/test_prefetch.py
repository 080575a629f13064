"""data.num_workers: background and multi-process rendering give the same stream as inline
rendering, and a worker's bad row reaches the trainer as the same one-line error."""

from __future__ import annotations

import json

import pytest
from prl_trainer_torch.loader import SampleSource, SFTLoader


def _steps(cfg, model, n):
    loader = SFTLoader(SampleSource(cfg.data, cfg.renderer, str(model)), cfg.data, 0, 1)
    return [[row.input_ids.tolist() for row in loader.next_step().rows] for _ in range(n)]


@pytest.mark.slow
def test_every_worker_count_gives_the_same_rows(tmp_path, tiny_model, reverse_data, sft_config):
    train, _ = reverse_data
    # 400 rows, 8 rows per step: 12 steps cross the epoch boundary with every worker count.
    streams = {
        workers: _steps(
            sft_config(tmp_path, tiny_model, train, data={"num_workers": workers, "batch_size": 8}), tiny_model, 12
        )
        for workers in (0, 1, 2)
    }
    assert streams[0] == streams[1] == streams[2]
    assert len({tuple(map(tuple, step)) for step in streams[0]}) == 12


@pytest.mark.slow
def test_bad_row_in_a_worker_process_names_the_row(tmp_path, tiny_model, sft_config):
    rows = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(9)]
    rows[5] = {"prompt": "p5", "completion": 7}
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = sft_config(tmp_path, tiny_model, path, data={"num_workers": 2, "shuffle": False})
    source = SampleSource(cfg.data, cfg.renderer, str(tiny_model))
    with pytest.raises(ValueError, match=r"^row 5: column 'completion' must be a list of messages or a string"):
        list(source.epoch(0, workers=2))


def _dies(code: int):
    """A source factory whose worker process exits without a word (as the OOM killer's
    victim does); module-level so a spawned worker finds it by name."""
    import os

    os._exit(code)


def test_a_worker_that_dies_silently_is_an_error_not_a_hang():
    from prl_trainer_torch.prefetch import parallel_samples

    from prl.config.errors import DataError

    with pytest.raises(DataError, match=r"data worker [01] exited \(code 9\) before finishing its rows"):
        list(parallel_samples(_dies, (9,), epoch=0, workers=2))


def test_a_producer_that_fails_at_start_is_raised_not_waited_for():
    from prl_trainer_torch.prefetch import ahead

    def make():
        raise ValueError("data.name: no rows")

    with pytest.raises(ValueError, match="no rows"):
        list(ahead(make, depth=2))
