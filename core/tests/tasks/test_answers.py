"""prl.tasks.answers: every extractor on ordinary replies and on the awkward ones."""

from __future__ import annotations

import pytest

from prl.tasks.answers import (
    extract_answer,
    extract_boxed,
    extract_hash_answer,
    extract_tag,
    final_line,
    last_int,
    last_number,
    parse_number,
    strip_think,
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (r"The answer is \boxed{42}.", "42"),
        (r"\boxed{1} then \boxed{2}", "2"),  # the last box wins
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces stay balanced
        (r"\boxed{ \{a, b\} }", r"\{a, b\}"),
        (r"$\boxed{x^{2}+1}$", "x^{2}+1"),
        (r"\fbox{7}", "7"),
        (r"\boxed {3}", "3"),
        (r"so \boxed 5$", "5"),  # bare form, ends at the math delimiter
        (r"\boxed{}", ""),
        (r"\boxed{2} and a truncated \boxed{3", "2"),  # an unclosed box is skipped
        (r"\boxed{\frac{1}{2}", None),
        ("no box here", None),
        ("", None),
    ],
)
def test_extract_boxed(text, want):
    assert extract_boxed(text) == want


def test_extract_tag_last_closed_unclosed_and_other_tags():
    assert extract_tag("<answer> 4 </answer>") == "4"
    assert extract_tag("<answer>1</answer> wait <answer>2</answer>") == "2"
    assert extract_tag("<answer>a\nb</answer>") == "a\nb"
    assert extract_tag("<answer>cut off") == "cut off"  # truncated reply still answers
    assert extract_tag("<answer>cut off", allow_unclosed=False) is None
    assert extract_tag("<answer>1</answer><answer>2", allow_unclosed=False) == "1"
    assert extract_tag("<final>x</final>", "final") == "x"
    assert extract_tag("<a.b>x</a.b>", "a.b") == "x"  # the tag name is literal, not a regex
    assert extract_tag("plain reply") is None
    assert extract_tag("<answer></answer>") == ""


def test_extract_answer_falls_back_to_the_stripped_reply():
    assert extract_answer("  olleh \n") == "olleh"
    assert extract_answer("thinking... <answer> olleh </answer>") == "olleh"
    assert extract_answer("") == ""


def test_strip_think():
    assert strip_think("<think>hmm 3?</think>\n\\boxed{4}") == "\\boxed{4}"
    assert strip_think("<think>a</think>b<think>c</think> d ") == "d"
    assert strip_think("<think>still thinking when cut off") == ""
    assert strip_think("reasoning the template opened</think> 5") == "5"  # opening tag in the prompt
    assert strip_think("  no tags ") == "no tags"


def test_extract_hash_answer():
    assert extract_hash_answer("She pays 3 * 4 = 12.\n#### 12") == "12"
    assert extract_hash_answer("#### 1,000\nextra line") == "1,000"
    assert extract_hash_answer("#### 1\n#### 2") == "2"
    assert extract_hash_answer("no marker") is None
    assert extract_hash_answer("####   ") is None


def test_final_line():
    assert final_line("work\nmore work\n\n  Answer: 7  \n\n") == "Answer: 7"
    assert final_line("one") == "one"
    assert final_line(" \n\t\n") is None
    assert final_line("") is None


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("so the total is 1,250.", "1250"),
        ("It costs $1,250.50.", "1250.50"),
        ("x = -3", "-3"),
        ("pages 3-5", "5"),  # a hyphen between numbers is not a sign
        ("f(2)-1", "1"),
        ("0.5 or .25", ".25"),
        ("rate 1e-3", "1e-3"),
        ("items 1,2,3", "3"),  # a list, not thousands separators
        ("v2 is 12345,678", "678"),
        ("no digits", None),
        ("", None),
    ],
)
def test_last_number(text, want):
    assert last_number(text) == want


def test_last_int_keeps_its_builtin_behaviour():
    assert last_int("I think 11") == 11
    assert last_int("1,000 apples") == 1000
    assert last_int("value: -4") == -4
    assert last_int("2.5") == 5  # digit runs, not decimals: proposer-solver relies on it
    assert last_int("none") is None


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("42", 42.0),
        (" -2.5 ", -2.5),
        ("1,000", 1000.0),
        ("1,000.5", 1000.5),
        ("1e-3", 0.001),
        ("3/4", 0.75),
        ("3 / 4", 0.75),
        (r"\frac{3}{4}", 0.75),
        (r"\dfrac{1}{8}", 0.125),
        (r"-\frac{1}{2}", -0.5),
        ("$12", 12.0),
        (r"\$1\,000", 1000.0),
        ("50%", 50.0),
        ("$-7$", -7.0),
        ("5.", 5.0),
        ("\u22123", -3.0),  # typeset minus sign
        ("1,2", None),
        ("1/0", None),
        ("nan", None),
        ("inf", None),
        ("1_000", None),
        ("twelve", None),
        ("", None),
        ("x = 3", None),  # a whole answer, not a search: use last_number for that
    ],
)
def test_parse_number(text, want):
    assert parse_number(text) == (pytest.approx(want) if want is not None else None)
