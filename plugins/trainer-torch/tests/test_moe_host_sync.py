"""An MoE model's router counts stay on the device: an SFT step reads no device value per
row, and the step's MoE metrics come from one read at its end."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from prl_trainer_torch.data import PackedRow
from prl_trainer_torch.device_rows import rows_to_device
from prl_trainer_torch.sft import SFTRun


def _count_host_reads():
    # pytest's importlib mode cannot import a sibling test module by name: load it by path
    spec = importlib.util.spec_from_file_location("host_reads", Path(__file__).with_name("host_reads.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.count_host_reads


count_host_reads = _count_host_reads()


@pytest.fixture(scope="session")
def tiny_moe_model(tmp_path_factory) -> Path:
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", "tiny-moe", seed=0)


def _rows(run: SFTRun, n: int) -> list[PackedRow]:
    rows: list[PackedRow] = []
    while len(rows) < n:
        rows.extend(run.loader.next_step().rows)
    return rows[:n]


def test_moe_routing_counts_read_nothing_per_row(tmp_path, tiny_moe_model, reverse_data, sft_config):
    moe = SFTRun(sft_config(tmp_path, tiny_moe_model, reverse_data[0], data={"num_workers": 0, "batch_size": 6}))
    try:
        assert moe.policy.routing is not None
        rows = rows_to_device(_rows(moe, 6), moe.dist.device)
        with count_host_reads() as seen:
            moe.accumulate(rows, scale=1.0)
        assert seen == []
        tokens = sum(int(r.input_ids.shape[1]) for r in rows)
        assert moe.policy.routing.stats[:, -1].tolist() == [float(tokens)] * 4  # every token, each of 4 layers
        with count_host_reads() as seen:
            metrics = moe.policy.routing.step_metrics()
        assert len(seen) == 1 and "max_vio/mean" in metrics
    finally:
        moe.close()
