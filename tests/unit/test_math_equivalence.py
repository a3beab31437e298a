"""Tricky equivalents and non-equivalents for the math verifier.

Cases follow the failure modes catalogued in "Pitfalls of Rule- and Model-based Verifiers — A Case Study on
Mathematical Reasoning" (Huang et al., arXiv:2505.22203): rule-based checkers reject correct answers written in
another form (false negatives: fractions vs decimals, LaTeX wrappers, units, equivalent expressions), and a
careless checker accepts wrong ones (false positives: truncation, prefix matches, sign slips).
"""

from __future__ import annotations

import pytest

from rlvr.rewards.verifiers import extract_answer, math_equal

EQUIVALENT = [
    ("1/2", "0.5"),
    ("\\frac{1}{2}", "0.5"),
    ("\\dfrac{3}{4}", "0.75"),
    ("\\frac12", "1/2"),
    ("2/4", "1/2"),
    ("50\\%", "0.5"),
    ("1,000", "1000"),
    ("1000.0", "1000"),
    ("\\boxed{7}", "7"),
    ("$7$", "7"),
    ("x = 7", "7"),
    ("\\sqrt{8}", "2\\sqrt{2}"),
    ("\\sqrt{4}", "2"),
    ("2x+1", "1+2x"),
    ("(x+1)^2", "x^2+2x+1"),
    ("\\pi/2", "\\frac{\\pi}{2}"),
    ("-\\frac{1}{3}", "-1/3"),
    ("\\frac{-1}{3}", "-1/3"),
    ("3.50", "3.5"),
    ("\\{1, 2, 3\\}", "\\{3, 2, 1\\}"),
    ("(1, 2)", "(1,2)"),
    ("\\left(1, 2\\right)", "(1, 2)"),
    ("10^{2}", "100"),
    ("2^{10}", "1024"),
    ("\\infty", "\\infty"),
    ("\\text{5}", "5"),
]

NOT_EQUIVALENT = [
    ("1/3", "0.33"),
    ("0.5", "0.05"),
    ("12", "123"),
    ("-3", "3"),
    ("x+1", "x-1"),
    ("\\sqrt{2}", "1.41"),
    ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("(1, 2)", "(2, 1)"),
    ("2x", "x^2"),
    ("1000", "100"),
    ("3.14", "\\pi"),
    ("\\{1, 2\\}", "\\{1, 2, 3\\}"),
    ("7", "77"),
    ("0", "-1"),
]


@pytest.mark.parametrize("pred,gold", EQUIVALENT)
def test_equivalent_forms_are_accepted(pred, gold):
    ok, reason = math_equal(pred, gold)
    assert ok, reason


@pytest.mark.parametrize("pred,gold", NOT_EQUIVALENT)
def test_near_misses_are_rejected(pred, gold):
    ok, reason = math_equal(pred, gold)
    assert not ok, reason


@pytest.mark.parametrize("text,expected", [
    ("so the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
    ("\\boxed{1} then corrected: \\boxed{2}", "2"),
    ("<answer>42</answer>", "42"),
    ("Final answer: 3/4", "3/4"),
    ("the result is 12 apples, no 13", "13"),
])
def test_extraction_before_comparison(text, expected):
    assert extract_answer(text) == expected


def test_garbage_is_rejected_not_raised():
    for pred in ("", "}{", "\\frac{", "((((", "x" * 10_000):
        ok, _ = math_equal(pred, "1")
        assert not ok
