"""The lab's intervals and verdicts against hand-computed values."""

from __future__ import annotations

import math
import statistics

import pytest

from rlvr.lab.stats import (
    VERDICT_RULE, Interval, difference_interval, mean_interval, paired_power, seeds_for_power, t_cdf, t_quantile,
    verdict,
)


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


def test_a_failed_seed_is_dropped_and_named_and_the_rest_stay_paired():
    # seed 1 failed in the control, seed 3 in the treatment: the effect is over seeds 0, 2 and 4, paired
    treat, ctrl = {0: 0.6, 1: 0.7, 2: 0.9, 4: 0.8}, {0: 0.5, 2: 0.6, 3: 0.4, 4: 0.6}
    iv = difference_interval(treat, ctrl)
    assert iv.seeds == (0, 2, 4) and iv.dropped == (1, 3) and iv.n == 3 and "paired by seed" in iv.method
    # diffs 0.1, 0.3, 0.2: mean 0.2, s 0.1, half width 4.302653 * 0.1 / sqrt(3) = 0.2484138
    assert iv.mean == pytest.approx(0.2) and iv.lo == pytest.approx(0.2 - 0.2484138, abs=1e-6)
    assert Interval.from_dict(iv.as_dict()) == iv
    # no common seed: nothing to say
    none = difference_interval({0: 1.0}, {1: 1.0})
    assert none.n == 0 and math.isinf(none.lo) and verdict(none, "higher", 0.01) == "inconclusive"


@pytest.mark.parametrize("method", ["t", "bootstrap"])
def test_one_seed_is_inconclusive_under_every_method(method):
    one = difference_interval({0: 0.9}, {0: 0.1}, method=method)
    assert one.n == 1 and math.isinf(one.lo) and math.isinf(one.hi)
    assert verdict(one, "higher", 0.01) == "inconclusive"
    assert verdict(Interval(0.8, 0.8, 0.8, 1, method), "higher", 0.01) == "inconclusive"  # even if handed a point


def test_bootstrap_of_identical_values_has_zero_width():
    flat = mean_interval([0.3, 0.3, 0.3], method="bootstrap")
    assert flat.lo == flat.hi == pytest.approx(0.3)


def test_equal_needs_a_positive_band():
    with pytest.raises(ValueError, match="min_effect > 0"):
        verdict(Interval(0.0, -0.01, 0.01, 5, "t"), "equal", 0.0)


@pytest.mark.parametrize("d, n", [(0.8, 15), (0.5, 34), (0.2, 199)])
def test_seeds_for_power_match_the_published_tables(d, n):
    # paired (one-sample) t test, two-sided alpha 0.05, power 0.80: n = 15, 34 and 199 for d = 0.8, 0.5, 0.2
    # (Cohen, Statistical Power Analysis, 1988; the same from G*Power's "means: difference from constant")
    assert seeds_for_power(1.0, d) == n
    assert paired_power(n, 1.0, d) >= 0.80 > paired_power(n - 1, 1.0, d)
    assert seeds_for_power(2.0, 2 * d) == n  # only effect / sd matters


def test_power_edge_cases():
    assert paired_power(1, 1.0, 5.0) == 0.0  # one seed never decides
    assert paired_power(5, 0.0, 0.1) == 1.0 and paired_power(5, 0.0, 0.0) == 0.0
    assert paired_power(5, 1.0, 0.0) == pytest.approx(0.025, abs=1e-9)  # the test's own one-sided error rate
    assert seeds_for_power(1.0, 0.01, max_n=50) is None
    with pytest.raises(ValueError):
        seeds_for_power(1.0, 0.0)
    with pytest.raises(ValueError):
        paired_power(5, -1.0, 0.1)


def test_the_docs_quote_the_rule_verbatim():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rule = " ".join(VERDICT_RULE.split())
    for page in ("docs/lab.md", "docs/findings.md"):
        lines = [line[2:] if line.startswith("> ") else line for line in (root / page).read_text().splitlines()]
        text = " ".join(" ".join(lines).split())  # a block quote's "> " markers are not part of the text
        assert rule in text, f"{page} does not quote rlvr.lab.stats.VERDICT_RULE verbatim"


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
