"""Unbiased pass@k against brute-force enumeration, and its numerical edges."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.eval import mean_pass_at_k, pass_at_k
from rlvr.eval.evaluate import length_summary, summarize


def brute_force(n: int, c: int, k: int) -> float:
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 10).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_matches_brute_force_enumeration(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12)


def test_edges():
    assert pass_at_k(16, 0, 16) == 0.0
    assert pass_at_k(16, 16, 1) == 1.0
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    assert pass_at_k(5, 1, 5) == 1.0


def test_large_n_and_k_are_stable_and_exact():
    n, c, k = 1024, 3, 256
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-10)
    assert 0.0 <= pass_at_k(4096, 1, 1000) <= 1.0


def test_monotone_in_k():
    vals = [pass_at_k(64, 5, k) for k in range(1, 65)]
    assert all(a <= b + 1e-15 for a, b in zip(vals, vals[1:]))


def test_bad_arguments():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_summary_breakdowns():
    problems = [
        {"id": "a", "difficulty": 2, "source": "s", "n": 4, "correct": 4, "truncated": 0},
        {"id": "b", "difficulty": 3, "source": "s", "n": 4, "correct": 1, "truncated": 1},
    ]
    out = summarize(problems, [1, 4], lengths=[10, 20])
    assert out["pass@k"]["1"] == pytest.approx((1.0 + 0.25) / 2)
    assert out["pass@k"]["4"] == pytest.approx(1.0)
    assert out["accuracy"] == pytest.approx(5 / 8)
    assert out["mean_length"] == 15
    assert out["truncated_frac"] == pytest.approx(1 / 8)
    assert out["by_difficulty"]["3"]["pass@k"]["1"] == pytest.approx(0.25)
    assert "by_source" not in out  # a single source is not a breakdown
    assert mean_pass_at_k([], 1) != mean_pass_at_k([], 1)  # NaN for no problems


def test_length_summary_by_hand():
    # lengths 10..100 in steps of 10: p10 = 19, p50 = 55, p90 = 91 (linear interpolation between order stats)
    lengths = list(range(10, 101, 10))
    correct = [True] * 4 + [False] * 6
    s = length_summary(lengths, correct)
    assert (s["p10"], s["p50"], s["p90"]) == pytest.approx((19.0, 55.0, 91.0))
    assert s["right_mean"] == pytest.approx(25.0) and s["wrong_mean"] == pytest.approx(75.0)
    assert length_summary([5, 7], [True, True])["wrong_mean"] is None
    assert length_summary([], [])["p10"] is None
