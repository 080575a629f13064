"""prl.tasks.scoring: each helper is a reward in [0, 1], and None (no answer) scores 0."""

from __future__ import annotations

import pytest

from prl.tasks.scoring import exact_match, lcs_length, lcs_ratio, normalize_text, numeric_match, token_f1


def test_lcs_ratio_values():
    assert lcs_ratio("abc", "abc") == 1.0
    assert lcs_ratio("abc", "xyz") == 0.0
    assert lcs_ratio("abcd", "abxd") == pytest.approx(0.75)
    assert lcs_ratio(["a", "b"], ["b"]) == pytest.approx(2 / 3)
    assert lcs_ratio("", "") == 1.0 and lcs_ratio("", "ab") == 0.0
    assert lcs_ratio(None, "ab") == 0.0


def test_lcs_length_is_symmetric():
    assert lcs_length("AGGTAB", "GXTXAYB") == lcs_length("GXTXAYB", "AGGTAB") == 4


def test_normalize_and_exact_match():
    assert normalize_text("  Paris\n is   nice. ") == "paris is nice"
    assert normalize_text("Paris.", case_sensitive=True) == "Paris"
    assert exact_match(" Paris. ", "paris") == 1.0
    assert exact_match("Paris", "paris", case_sensitive=True) == 0.0
    assert exact_match("a  b", "a b", normalize=False) == 0.0
    assert exact_match("AB", "ab", normalize=False) == 1.0
    assert exact_match(None, "x") == 0.0
    assert exact_match("London", "Paris") == 0.0


def test_numeric_match():
    assert numeric_match("1,000", "1000") == 1.0
    assert numeric_match(r"\frac{1}{2}", "0.5") == 1.0
    assert numeric_match("0.3333333", "1/3", rel_tol=1e-6) == 1.0
    assert numeric_match("0.33", "1/3") == 0.0
    assert numeric_match("3", 3) == 1.0 and numeric_match(2.0, "2") == 1.0
    assert numeric_match("three", "3") == 0.0 and numeric_match(None, "3") == 0.0
    assert numeric_match(True, 1) == 0.0  # a bool is never a numeric answer


def test_token_f1():
    assert token_f1("the cat sat", "the cat sat") == 1.0
    assert token_f1("cat", "the cat") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert token_f1("dog", "cat") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("", "cat") == 0.0 and token_f1(None, "cat") == 0.0
