"""Intervals over seeds and the verdict of a finding: pure functions, no I/O.

A finding compares a treatment arm with a control arm on one metric, each measured once per seed. The effect
is `treatment - control`. When both arms ran the same seeds, the seeds are paired (same initial weights, same
prompt order, same held-out problems) and the interval is over the per-seed differences; otherwise the two arms
are independent samples (Welch).

Two interval methods:
- `t`: mean ± t(0.975, df) · s/√n (Welch-Satterthwaite df for unpaired arms);
- `bootstrap`: the 2.5% and 97.5% percentiles of the mean over resamples of the seeds (seeded, so a table
  re-computes identically). With 5 seeds it is narrower than t and under-covers; t is the default.

The verdict reads the interval against the paper's claimed direction and the finding's `min_effect`, the
smallest effect that would count as the claim holding:
- higher / lower: not reproduced when the whole interval lies below `min_effect` on the claimed side (an effect
  that large is ruled out, even when a smaller one is certain); else reproduced when the whole interval is on
  the claimed side of 0; else inconclusive.
- equal (a claim of "about as good"): reproduced when the whole interval lies within ±min_effect; not
  reproduced when the whole interval lies outside it; else inconclusive.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

Direction = Literal["higher", "lower", "equal"]
Method = Literal["t", "bootstrap"]
VERDICTS = ("reproduced", "not reproduced", "inconclusive")


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on the CDF; |error| < 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1); got {p}")
    if df <= 0:
        raise ValueError(f"df must be positive; got {df}")
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int
    method: str

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def mean_interval(values: Sequence[float], *, level: float = 0.95, method: Method = "t", seed: int = 0,
                  draws: int = 10_000) -> Interval:
    """The mean of `values` with a `level` confidence interval. One value gives an infinite t interval (and a
    zero-width bootstrap one, which is why t is the default)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("no values: every run of this arm failed or none has finished")
    mean = statistics.fmean(xs)
    if method == "t":
        if len(xs) < 2:
            return Interval(mean, -math.inf, math.inf, len(xs), "t")
        half = t_quantile(0.5 + level / 2.0, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
        return Interval(mean, mean - half, mean + half, len(xs), "t")
    if method == "bootstrap":
        lo, hi = _percentiles(_bootstrap_means([xs], seed, draws), level)
        return Interval(mean, lo, hi, len(xs), "bootstrap")
    raise ValueError(f"method: expected 't' or 'bootstrap'; got {method!r}")


def difference_interval(treatment: dict[int, float], control: dict[int, float], *, level: float = 0.95,
                        method: Method = "t", seed: int = 0, draws: int = 10_000) -> Interval:
    """The interval of mean(treatment) - mean(control), each given as {seed: value}. Paired over seeds when the
    two arms ran the same seeds, else Welch (t) or independent resampling of each arm (bootstrap)."""
    if not treatment or not control:
        raise ValueError("an arm has no finished runs")
    if set(treatment) == set(control):
        diffs = [treatment[s] - control[s] for s in sorted(treatment)]
        paired = mean_interval(diffs, level=level, method=method, seed=seed, draws=draws)
        return Interval(paired.mean, paired.lo, paired.hi, paired.n, f"{paired.method}, paired by seed")
    a, b = list(treatment.values()), list(control.values())
    mean = statistics.fmean(a) - statistics.fmean(b)
    if method == "t":
        if len(a) < 2 or len(b) < 2:
            return Interval(mean, -math.inf, math.inf, min(len(a), len(b)), "welch t")
        va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
        se = math.sqrt(va + vb)
        if se == 0.0:
            return Interval(mean, mean, mean, min(len(a), len(b)), "welch t")
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
        half = t_quantile(0.5 + level / 2.0, df) * se
        return Interval(mean, mean - half, mean + half, min(len(a), len(b)), "welch t")
    if method == "bootstrap":
        ma, mb = _bootstrap_means([a], seed, draws), _bootstrap_means([b], seed + 1, draws)
        lo, hi = _percentiles([x - y for x, y in zip(ma, mb)], level)
        return Interval(mean, lo, hi, min(len(a), len(b)), "bootstrap")
    raise ValueError(f"method: expected 't' or 'bootstrap'; got {method!r}")


def _bootstrap_means(samples: list[list[float]], seed: int, draws: int) -> list[float]:
    rng = random.Random(seed)
    xs = samples[0]
    return [statistics.fmean(rng.choices(xs, k=len(xs))) for _ in range(draws)]


def _percentiles(values: list[float], level: float) -> tuple[float, float]:
    ordered = sorted(values)
    alpha = (1.0 - level) / 2.0

    def at(q: float) -> float:  # linear interpolation between order statistics
        pos = q * (len(ordered) - 1)
        i = int(math.floor(pos))
        j = min(i + 1, len(ordered) - 1)
        return ordered[i] + (ordered[j] - ordered[i]) * (pos - i)

    return at(alpha), at(1.0 - alpha)


def verdict(effect: Interval, direction: Direction, min_effect: float) -> str:
    """reproduced / not reproduced / inconclusive for `effect` = treatment - control (see the module doc)."""
    if min_effect < 0:
        raise ValueError(f"min_effect must be >= 0; got {min_effect}")
    if direction == "equal":
        if -min_effect < effect.lo and effect.hi < min_effect:
            return "reproduced"
        if effect.lo >= min_effect or effect.hi <= -min_effect:
            return "not reproduced"
        return "inconclusive"
    sign = 1.0 if direction == "higher" else -1.0
    lo, hi = sorted((sign * effect.lo, sign * effect.hi))
    if hi < min_effect:  # checked first: an effect that is real but wholly below what counts is not the claim
        return "not reproduced"
    if lo > 0:
        return "reproduced"
    return "inconclusive"
