"""The SFT step's rows never make the host wait for the device: prl's step code reads no
device value per row (``.item()``, ``int()``, ``float()``, a truth test, ``.tolist()``),
and on a GPU not one synchronising call, transformers' included, happens between the
first row's forward and the last row's backward. A read per row would stop the host from queueing row k+1 until row k's
backward had finished, leaving the GPU idle between rows."""

from __future__ import annotations

import contextlib
import sys

import pytest
import torch
from prl_trainer_torch.data import PackedRow
from prl_trainer_torch.device_rows import rows_to_device
from prl_trainer_torch.sft import SFTRun

READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")


@contextlib.contextmanager
def count_host_reads():
    """Counts every read of a tensor's value into Python made by prl's own code while
    active (transformers' CPU attention mask reads one per forward to find packed
    documents; on a GPU prl's attention needs no mask and the GPU test sees everything)."""
    seen: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def counting(name):
        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if "prl_" in caller and "/tests/" not in caller:
                seen.append(f"{name} from {caller}:{sys._getframe(1).f_lineno}")
            return originals[name](self, *args, **kwargs)

        return read

    for name in READS:
        setattr(torch.Tensor, name, counting(name))
    try:
        yield seen
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


@pytest.fixture
def run(tmp_path, tiny_model, reverse_data, sft_config):
    train, _ = reverse_data
    r = SFTRun(sft_config(tmp_path, tiny_model, train, data={"num_workers": 0, "batch_size": 6}))
    yield r
    r.close()


def _rows(run, n: int) -> list[PackedRow]:
    rows: list[PackedRow] = []
    while len(rows) < n:
        rows.extend(run.loader.next_step().rows)
    return rows[:n]


def test_the_rows_of_a_step_are_trained_without_reading_a_device_value(run):
    rows = rows_to_device(_rows(run, 6), run.dist.device)
    counts = []
    for k in (1, 6):
        with count_host_reads() as seen:
            nll, nans = run.accumulate(rows[:k], scale=1.0)
        counts.append(len(seen))
        assert float(nans) == 0 and float(nll) > 0
    assert counts == [0, 0], seen


def test_rows_on_the_device_keep_their_tokens_masks_and_documents(run):
    host = _rows(run, 3)
    for row, dev in zip(host, rows_to_device(host, run.dist.device), strict=True):
        n = row.num_tokens
        assert dev.input_ids.shape == (1, n)
        assert torch.equal(dev.input_ids[0].cpu(), row.input_ids[:n])
        assert torch.equal(dev.position_ids[0].cpu(), row.position_ids[:n])
        assert torch.equal(dev.targets[0].cpu(), row.targets[:n])
        assert torch.equal(dev.loss_mask[0].cpu(), row.loss_mask[:n].bool())
        assert dev.loss_tokens == int(row.loss_mask[:n].sum())
        cu, longest = dev.bounds
        assert cu.dtype == torch.int32
        assert cu.cpu().tolist() == [0, *torch.tensor(row.lengths).cumsum(0).tolist()]
        assert longest == max(row.lengths)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_no_row_synchronises(run):
    run.train_step()  # the first step compiles, which may wait
    rows = rows_to_device(_rows(run, 6), run.dist.device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run.accumulate(rows, scale=1.0)
    finally:
        torch.cuda.set_sync_debug_mode("default")
