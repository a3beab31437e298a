"""Intervals over seeds, the verdict of a finding and its power: pure functions, no I/O.

A finding compares a treatment arm with a control arm on one metric, each measured once per seed. The effect
is `treatment - control`, paired by seed: the two arms of one seed share the initial weights, the prompt order
and the held-out problems, so the interval is over the per-seed differences of the seeds both arms finished.
A seed that only one arm finished is left out and named (`Interval.dropped`); the comparison stays paired.

Two interval methods, both from scipy.stats:
- `t`: mean ± t(0.975, n - 1) · s/√n;
- `bootstrap`: the 2.5% and 97.5% percentiles of the mean over resamples of the seeds (seeded, so a table
  re-computes identically). With 5 seeds it is narrower than t and under-covers; t is the default.
Fewer than two values give an infinite interval under both: one run says nothing about the spread.

The verdict rule, in the terms of equivalence testing (m = min_effect, the smallest effect of interest):
effect = treatment - control, signed so that the claimed direction is positive, with its 95% interval [lo, hi].
Fewer than two paired seeds: inconclusive. For a claim of higher or lower: not reproduced when hi < m (an
effect as large as m is ruled out, whatever its sign); else reproduced when lo > 0 (an effect on the claimed
side of 0 that is not shown to be smaller than m); else inconclusive. For a claim of equal (m > 0): reproduced
when -m < lo and hi < m (the interval lies within the equivalence band); not reproduced when lo >= m or
hi <= -m (it lies outside it); else inconclusive.

Power (`paired_power`, `seeds_for_power`): the probability that a paired t interval over n seeds lies on the
claimed side of 0 when the true effect is `effect` and the per-seed differences have standard deviation `sd`:
P(T' > t(0.975, n - 1)) for T' noncentral t with n - 1 degrees of freedom and noncentrality effect·√n/sd.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import stats as sps

Direction = Literal["higher", "lower", "equal"]
Method = Literal["t", "bootstrap"]
VERDICTS = ("reproduced", "not reproduced", "inconclusive")
# The rule as the docs quote it (docs/lab.md and docs/findings.md carry this text verbatim; a test checks it).
VERDICT_RULE = __doc__.split("The verdict rule, in the terms of equivalence testing ")[1].split("\n\nPower")[0]
VERDICT_RULE = "The verdict rule, in the terms of equivalence testing " + VERDICT_RULE


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1); got {p}")
    if df <= 0:
        raise ValueError(f"df must be positive; got {df}")
    return float(sps.t.ppf(p, df))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    return float(sps.t.cdf(t, df))


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int
    method: str
    seeds: tuple[int, ...] = field(default=())  # the seeds a paired effect is over
    dropped: tuple[int, ...] = field(default=())  # seeds only one arm finished, left out of a paired effect

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seeds"], d["dropped"] = list(self.seeds), list(self.dropped)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Interval":
        return cls(float(d["mean"]), float(d["lo"]), float(d["hi"]), int(d["n"]), str(d["method"]),
                   tuple(d.get("seeds", ())), tuple(d.get("dropped", ())))


def mean_interval(values: Sequence[float], *, level: float = 0.95, method: Method = "t", seed: int = 0,
                  draws: int = 10_000) -> Interval:
    """The mean of `values` with a `level` confidence interval (infinite for fewer than two values)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("no values: every run of this arm failed or none has finished")
    if method not in ("t", "bootstrap"):
        raise ValueError(f"method: expected 't' or 'bootstrap'; got {method!r}")
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return Interval(mean, -math.inf, math.inf, len(xs), method)
    if method == "t":
        half = t_quantile(0.5 + level / 2.0, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
        return Interval(mean, mean - half, mean + half, len(xs), "t")
    if max(xs) == min(xs):  # every resample has the same mean
        return Interval(mean, mean, mean, len(xs), "bootstrap")
    res = sps.bootstrap((np.asarray(xs),), np.mean, confidence_level=level, n_resamples=draws, method="percentile",
                        rng=np.random.default_rng(seed))
    return Interval(mean, float(res.confidence_interval.low), float(res.confidence_interval.high), len(xs),
                    "bootstrap")


def difference_interval(treatment: Mapping[int, float], control: Mapping[int, float], *, level: float = 0.95,
                        method: Method = "t", seed: int = 0, draws: int = 10_000) -> Interval:
    """The interval of treatment - control, each given as {seed: value}, paired over the seeds both have; the
    others are named in `dropped`."""
    if not treatment or not control:
        raise ValueError("an arm has no finished runs")
    common = sorted(set(treatment) & set(control))
    dropped = tuple(sorted(set(treatment) ^ set(control)))
    what = f"{method}, paired by seed"
    if not common:
        return Interval(math.nan, -math.inf, math.inf, 0, what, (), dropped)
    diffs = [treatment[s] - control[s] for s in common]
    iv = mean_interval(diffs, level=level, method=method, seed=seed, draws=draws)
    return Interval(iv.mean, iv.lo, iv.hi, iv.n, what, tuple(common), dropped)


def verdict(effect: Interval, direction: Direction, min_effect: float) -> str:
    """reproduced / not reproduced / inconclusive for `effect` = treatment - control (VERDICT_RULE)."""
    if min_effect < 0:
        raise ValueError(f"min_effect must be >= 0; got {min_effect}")
    if direction == "equal" and min_effect <= 0:
        raise ValueError("min_effect: a claim of 'equal' needs min_effect > 0 (the equivalence band); with 0 it "
                         "could never be reproduced")
    if effect.n < 2 or not (math.isfinite(effect.lo) and math.isfinite(effect.hi)):
        return "inconclusive"
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


def paired_power(n: int, sd: float, effect: float, level: float = 0.95) -> float:
    """The probability that a paired t interval over `n` seeds lies above 0 when the true effect is `effect`
    (> 0: in the claimed direction) and the per-seed differences have standard deviation `sd` (module doc)."""
    if n < 1 or sd < 0 or not 0.0 < level < 1.0:
        raise ValueError(f"paired_power: need n >= 1, sd >= 0 and 0 < level < 1; got n={n}, sd={sd}, level={level}")
    if n < 2:
        return 0.0  # one seed is always inconclusive
    if sd == 0.0:
        return 1.0 if effect > 0 else 0.0
    crit = t_quantile(0.5 + level / 2.0, n - 1)
    return float(sps.nct.sf(crit, n - 1, effect * math.sqrt(n) / sd))


def equivalence_power(n: int, sd: float, band: float, level: float = 0.95) -> float:
    """The chance that a paired t interval over n seeds lies inside ±band when the true effect is 0 (a claim of
    `equal`), with the mean taken as normal with sd/√n and s as sd: 2Φ(band·√n/sd − t(0.975, n − 1)) − 1, at
    least 0 (an approximation: it ignores the spread of s)."""
    if n < 2:
        return 0.0
    if sd <= 0:
        return 1.0
    return max(0.0, 2.0 * float(sps.norm.cdf(band * math.sqrt(n) / sd - t_quantile(0.5 + level / 2.0, n - 1))) - 1.0)


def seeds_for_equivalence(sd: float, band: float, power: float = 0.8, max_n: int = 1000) -> int | None:
    """The fewest seeds (>= 2) at which `equivalence_power` reaches `power`; None beyond `max_n`."""
    return next((n for n in range(2, max_n + 1) if equivalence_power(n, sd, band) >= power), None)


def seeds_for_power(sd: float, effect: float, power: float = 0.8, level: float = 0.95,
                    max_n: int = 1000) -> int | None:
    """The fewest seeds (>= 2) whose paired t interval excludes 0 with probability `power` at `effect`; None
    when even `max_n` seeds do not reach it."""
    if effect <= 0:
        raise ValueError(f"seeds_for_power: the effect must be > 0 (in the claimed direction); got {effect}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"seeds_for_power: power must be in (0, 1); got {power}")
    for n in range(2, max_n + 1):
        if paired_power(n, sd, effect, level) >= power:
            return n
    return None
