"""The lab's intervals and verdicts against hand-computed values."""

from __future__ import annotations

import math
import statistics

import pytest

from rlvr.lab.stats import Interval, difference_interval, mean_interval, t_cdf, t_quantile, verdict


@pytest.mark.parametrize("df, q975", [(1, 12.706204736), (2, 4.302652730), (4, 2.776445105), (9, 2.262157163),
                                      (30, 2.042272456)])
def test_t_quantiles_match_the_tables(df, q975):
    assert t_quantile(0.975, df) == pytest.approx(q975, abs=1e-8)
    assert t_quantile(0.025, df) == pytest.approx(-q975, abs=1e-8)
    assert t_cdf(q975, df) == pytest.approx(0.975, abs=1e-10)


def test_t_tends_to_the_normal():
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959963985, abs=1e-5)
    assert t_cdf(0.0, 3) == pytest.approx(0.5, abs=1e-15)


def test_mean_interval_by_hand():
    # 1..5: mean 3, s = sqrt(2.5), t(0.975, 4) = 2.776445 -> half width 2.776445 * 1.581139 / 2.236068 = 1.963243
    iv = mean_interval([1, 2, 3, 4, 5])
    assert iv.mean == 3.0 and iv.n == 5
    assert iv.lo == pytest.approx(3 - 1.9632432, abs=1e-6) and iv.hi == pytest.approx(3 + 1.9632432, abs=1e-6)
    # one seed says nothing about the spread
    one = mean_interval([0.4])
    assert one.mean == 0.4 and math.isinf(one.lo) and math.isinf(one.hi)
    # identical values: zero width
    flat = mean_interval([0.3, 0.3, 0.3])
    assert flat.lo == pytest.approx(0.3) and flat.hi == pytest.approx(0.3)
    with pytest.raises(ValueError, match="no values"):
        mean_interval([])


def test_bootstrap_is_seeded_and_inside_the_range():
    xs = [0.1, 0.5, 0.2, 0.9, 0.4]
    a, b = mean_interval(xs, method="bootstrap", seed=3), mean_interval(xs, method="bootstrap", seed=3)
    assert a == b
    assert min(xs) <= a.lo < a.mean < a.hi <= max(xs)
    assert a.mean == pytest.approx(statistics.fmean(xs))


def test_paired_difference_by_hand():
    # differences per seed: 0.1, 0.2, 0.3 -> mean 0.2, s = 0.1, t(0.975, 2) = 4.302653: half width 0.248414
    treat, ctrl = {0: 0.6, 1: 0.7, 2: 0.9}, {0: 0.5, 1: 0.5, 2: 0.6}
    iv = difference_interval(treat, ctrl)
    assert iv.mean == pytest.approx(0.2) and "paired" in iv.method
    assert iv.lo == pytest.approx(0.2 - 0.2484138, abs=1e-6) and iv.hi == pytest.approx(0.2 + 0.2484138, abs=1e-6)


def test_welch_difference_by_hand():
    # different seeds: Welch. a = [1, 2, 3] (var 1), b = [2, 4, 6, 8] (var 20/3)
    a, b = {0: 1.0, 1: 2.0, 2: 3.0}, {10: 2.0, 11: 4.0, 12: 6.0, 13: 8.0}
    iv = difference_interval(a, b)
    va, vb = 1.0 / 3, (20.0 / 3) / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    half = t_quantile(0.975, df) * math.sqrt(va + vb)
    assert iv.mean == pytest.approx(2.0 - 5.0) and iv.method == "welch t"
    assert iv.lo == pytest.approx(-3.0 - half) and iv.hi == pytest.approx(-3.0 + half)
    assert df == pytest.approx(4.0754717, abs=1e-6)  # (1/3 + 5/3)^2 / ((1/3)^2/2 + (5/3)^2/3)


def iv(lo, hi):
    return Interval((lo + hi) / 2, lo, hi, 5, "t")


@pytest.mark.parametrize("interval, direction, min_effect, expected", [
    (iv(0.01, 0.05), "higher", 0.02, "reproduced"),       # all above 0
    (iv(-0.03, 0.015), "higher", 0.02, "not reproduced"),  # all below the smallest effect that counts
    (iv(-0.01, 0.04), "higher", 0.02, "inconclusive"),
    (iv(-0.05, -0.01), "higher", 0.0, "not reproduced"),  # the opposite sign
    (iv(-0.05, -0.01), "lower", 0.02, "reproduced"),
    (iv(-0.015, 0.03), "lower", 0.02, "not reproduced"),   # a decrease of 0.02 or more is ruled out
    (iv(-0.04, 0.01), "lower", 0.02, "inconclusive"),
    (iv(-0.02, 0.03), "equal", 0.05, "reproduced"),
    (iv(0.06, 0.2), "equal", 0.05, "not reproduced"),
    (iv(0.01, 0.09), "equal", 0.05, "inconclusive"),
    (iv(-math.inf, math.inf), "higher", 0.02, "inconclusive"),
    # certain but too small to count: the smallest effect that counts decides first
    (iv(-0.54, -0.15), "lower", 1.0, "not reproduced"),
    (iv(0.005, 0.015), "higher", 0.02, "not reproduced"),
    (iv(0.005, 0.03), "higher", 0.02, "reproduced"),
])
def test_verdicts(interval, direction, min_effect, expected):
    assert verdict(interval, direction, min_effect) == expected
