"""The ratio and masking helpers every loss builds on, on edge inputs checked by hand."""

import math

import pytest
import torch
from prl_loss_common import log_band, masked_fraction, masked_mean, mismatch_kl, weights_or_ones


def test_mismatch_kl_clips_the_log_ratio_at_60():
    # documented: an extreme token gives e^60 − 1 − 60, a large finite number, not inf
    kl = mismatch_kl(torch.tensor([1e4, 60.0], dtype=torch.float64))
    assert kl.tolist() == pytest.approx([math.expm1(60.0) - 60.0] * 2, rel=1e-12)


def test_weights_or_ones_follows_the_logprob_dtype():
    for dtype, other in [(torch.float32, torch.float64), (torch.float64, torch.float32)]:
        like = torch.zeros(3, dtype=dtype)
        ones = weights_or_ones(None, like)
        assert ones.dtype == dtype and ones.tolist() == [1.0, 1.0, 1.0]
        weights = weights_or_ones(torch.tensor([0.5, 0.0, 2.0], dtype=other), like)
        assert weights.dtype == dtype and weights.tolist() == [0.5, 0.0, 2.0]
    # a non-float ``like`` still gives float weights
    ints = torch.zeros(2, dtype=torch.int64)
    assert weights_or_ones(None, ints).dtype == torch.float32
    assert weights_or_ones(torch.tensor([1, 3]), ints).dtype == torch.float32


def test_masked_mean_keeps_a_float_dtype():
    mean = masked_mean(torch.tensor([1.0, 2.0, 7.0], dtype=torch.float64), torch.tensor([True, True, False]))
    assert mean.dtype == torch.float64 and float(mean) == 1.5


def test_masked_mean_of_integer_values_is_a_float_mean():
    mean = masked_mean(torch.tensor([1, 2, 7]), torch.tensor([True, True, False]))
    assert mean.dtype == torch.float32 and float(mean) == 1.5
    assert float(masked_fraction(torch.tensor([True, False, True]), torch.tensor([1, 1, 0]))) == 0.5


def test_log_band_without_a_lower_edge():
    assert log_band(0.0, 2.0) == (-math.inf, math.log(2.0))
    assert log_band(0.5, 2.0) == (math.log(0.5), math.log(2.0))
    # a lower edge of exactly 1 is a real edge at log 1 = 0, not a missing one
    assert log_band(1.0, 1.0) == (0.0, 0.0)
