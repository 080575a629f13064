"""RL trainer perf metrics: throughput over all ranks and per GPU, MFU only with a known peak."""

import pytest
import torch
from prl_trainer_torch.metrics import model_flops, peak_flops, perf_metrics

CPU = torch.device("cpu")


def test_throughput_is_per_step_and_per_gpu_and_mfu_needs_a_peak():
    out = perf_metrics(flops=8e12, tokens=4000, seconds=2.0, world=4, peak=None)
    assert out == {"perf/throughput": 2000.0, "perf/throughput_per_gpu": 500.0}  # no peak: no mfu
    out = perf_metrics(flops=8e12, tokens=4000, seconds=2.0, world=4, peak=1e12)
    assert out["perf/mfu"] == pytest.approx(1.0)  # 4e12 FLOP/s achieved over 4 x 1e12


def test_model_flops_are_six_n_per_token_plus_causal_attention():
    # 6 N T for the matmuls, 6 * layers * hidden * L^2 per document for attention
    assert model_flops(1000, 2, 8, [3, 4]) == 6 * 1000 * 7 + 6 * 2 * 8 * (9 + 16)


def test_peak_flops_on_cpu_is_unknown_unless_configured(monkeypatch, caplog):
    monkeypatch.delenv("PRL_PEAK_FLOPS", raising=False)
    assert peak_flops(CPU) is None
    monkeypatch.setenv("PRL_PEAK_FLOPS", "2.5e12")
    assert peak_flops(CPU) == 2.5e12
    monkeypatch.setenv("PRL_PEAK_FLOPS", "fast")
    assert peak_flops(CPU) is None
    assert "PRL_PEAK_FLOPS='fast' is not a positive number" in caplog.text
