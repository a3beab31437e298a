"""pass@k with the unbiased estimator.

For a problem with n samples of which c are correct, the probability that at least one of k samples drawn
without replacement is correct is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

(Chen et al., "Evaluating Large Language Models Trained on Code", arXiv:2107.03374). The product form
never builds a large binomial coefficient, so it is exact enough for n and k in the thousands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= correct <= samples; got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n; got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """Mean pass@k over problems given as (n, c) pairs."""
    if not counts:
        return float("nan")
    return float(np.mean([pass_at_k(n, c, k) for n, c in counts]))


# --------------------------------------------------------------------------------------------------------------
# maj@k: majority-vote accuracy


def majority_classes(answers: Sequence[str | None], correct_flags: Sequence[bool]) -> tuple[list[int], list[bool], int]:
    """Group answers into vote classes: (count per class, whether the class is correct, number of abstentions).

    Answers are compared after `str.strip()`. `None` and blank answers are abstentions: they are drawn like any
    sample but never win a vote. A class is correct when any of its samples was verified correct (a verifier
    gives equal answers equal verdicts, so this only matters for verifiers that look beyond the answer).
    """
    if len(answers) != len(correct_flags):
        raise ValueError(f"got {len(answers)} answers but {len(correct_flags)} correctness flags")
    index: dict[str, int] = {}
    counts: list[int] = []
    correct: list[bool] = []
    abstain = 0
    for a, ok in zip(answers, correct_flags):
        key = a.strip() if isinstance(a, str) else None
        if not key:
            abstain += 1
            continue
        if key not in index:
            index[key] = len(counts)
            counts.append(0)
            correct.append(False)
        i = index[key]
        counts[i] += 1
        correct[i] = correct[i] or bool(ok)
    return counts, correct, abstain


def maj_at_k(answers: Sequence[str | None], correct_flags: Sequence[bool], k: int, *, method: str = "auto",
             draws: int = 20_000, seed: int = 0) -> float:
    """Expected majority-vote accuracy of k samples drawn without replacement from the n given.

    maj@k = E_S[ 1{majority answer of S is correct} ],  S a uniformly random k-subset of the n samples,

    with ties broken uniformly at random (a tie between a correct and a wrong class counts 1/2) and abstentions
    (`None` or blank answers) never winning; a subset of abstentions only scores 0. This is the "majority
    voting" / self-consistency metric (Wang et al., arXiv:2203.11171) averaged over subsets like the unbiased
    pass@k, so maj@1 is the fraction of correct samples and maj@n the plain majority vote over all n.

    `method="exact"` sums over the winning count t of each correct class c with a dynamic programme over the
    other classes (how many are drawn, how many tie at t):

        P(c wins) = sum_t C(m_c, t) * sum_{d, e} W_t(d, e) * C(F_t, k - t - d) / (e + 1) / C(n, k)

    where W_t(d, e) counts the ways to draw d samples from the classes with m_i >= t, none above t and e of them
    exactly at t, and F_t is the number of remaining samples (abstentions and classes too small to reach t),
    which are unconstrained. `method="mc"` estimates the same expectation from `draws` seeded random subsets
    (standard error <= 0.5 / sqrt(draws), 0.0035 for the default). `"auto"` is exact unless n > 1000 (the binomials
    leave float range) or the programme would exceed ~5e7 element operations, which real answer distributions
    (a few large classes and a tail of singletons) stay far below.
    """
    n = len(answers)
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n; got k={k}, n={n}")
    counts, correct, abstain = majority_classes(answers, correct_flags)
    if not any(correct):
        return 0.0
    if method == "auto":
        method = "exact" if n <= 1000 and _exact_cost(counts, correct, k) <= 5e7 else "mc"
    if method == "exact":
        return _maj_exact(counts, correct, n, k)
    if method == "mc":
        return _maj_monte_carlo(counts, correct, abstain, k, draws, seed)
    raise ValueError(f"method must be 'auto', 'exact' or 'mc'; got {method!r}")


def mean_maj_at_k(problems: Sequence[tuple[Sequence[str | None], Sequence[bool]]], k: int) -> float:
    """Mean maj@k over problems given as (answers, correct_flags) pairs."""
    if not problems:
        return float("nan")
    return float(np.mean([maj_at_k(a, c, k) for a, c in problems]))


def _exact_cost(counts: list[int], correct: list[bool], k: int) -> float:
    cost = 0.0
    for j, mj in enumerate(counts):
        if not correct[j]:
            continue
        for t in range(1, min(mj, k) + 1):
            rest = k - t
            c_t = sum(1 for i, m in enumerate(counts) if i != j and m >= t)
            cost += c_t * min(t, rest + 1) * (min(c_t, rest // t) + 1) * (rest + 1)
    return cost


def _maj_exact(counts: list[int], correct: list[bool], n: int, k: int) -> float:
    from math import comb

    total = 0.0
    for j, mj in enumerate(counts):
        if not correct[j]:
            continue
        for t in range(1, min(mj, k) + 1):
            rest = k - t
            others = [m for i, m in enumerate(counts) if i != j and m >= t]
            free = n - mj - sum(others)
            max_ties = rest // t  # each tying class takes t of the remaining k - t draws
            dp = np.zeros((1, rest + 1))  # dp[e, d]: ways to draw d from the classes so far, e of them tied at t
            dp[0, 0] = 1.0
            for m in others:
                rows = min(dp.shape[0] + 1, max_ties + 1)
                new = np.zeros((rows, rest + 1))
                for x in range(min(t - 1, rest) + 1):  # below t: this class loses to c
                    new[: dp.shape[0], x:] += dp[:, : rest + 1 - x] * float(comb(m, x))
                if t <= rest and rows > 1:  # exactly t: a tie
                    new[1:, t:] += dp[: rows - 1, : rest + 1 - t] * float(comb(m, t))
                dp = new
            fill = np.array([float(comb(free, rest - d)) for d in range(rest + 1)])
            by_ties = dp @ fill
            total += float(comb(mj, t)) * float(np.sum(by_ties / np.arange(1, len(by_ties) + 1)))
    return min(1.0, total / float(comb(n, k)))


def _maj_monte_carlo(counts: list[int], correct: list[bool], abstain: int, k: int, draws: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    r = len(counts)
    labels = np.concatenate([np.repeat(np.arange(r), counts), np.full(abstain, r)])  # r = abstention
    is_correct = np.array(correct, dtype=bool)
    n = len(labels)
    score, done, chunk = 0.0, 0, max(1, min(draws, 4_000_000 // max(n, 1)))
    while done < draws:
        b = min(chunk, draws - done)
        picks = np.argpartition(rng.random((b, n)), k - 1, axis=1)[:, :k]
        drawn = labels[picks]
        flat = (np.arange(b)[:, None] * (r + 1) + drawn).ravel()
        votes = np.bincount(flat, minlength=b * (r + 1)).reshape(b, r + 1)[:, :r]
        top = votes.max(axis=1)
        tied = (votes == top[:, None]) & (top[:, None] > 0)
        wins = (tied & is_correct).sum(axis=1) / np.maximum(tied.sum(axis=1), 1)
        score += float(wins.sum())
        done += b
    return score / draws


# --------------------------------------------------------------------------------------------------------------
# rm@k: best-of-k selection by a scorer (a reward model)


def best_of_k(scores: Sequence[float], correct_flags: Sequence[bool], k: int) -> float:
    """Expected accuracy of the top-scored sample among k drawn without replacement from the n given.

    rm@k = E_S[ correct(argmax_{i in S} score_i) ],  S a uniformly random k-subset,

    with a tie at the top broken uniformly at random. Exact: sort the scores in descending order and group equal
    scores; with `a` samples scored above a group of size g, the subset's top lies in that group with probability
    (C(n - a, k) - C(n - a - g, k)) / C(n, k), and by symmetry the pick inside it is correct with probability
    (correct in the group) / g. So rm@1 is the fraction of correct samples and rm@n the top-scored sample's
    correctness (a tied top: its mean). A non-finite score ranks below every finite one.
    """
    n = len(scores)
    if len(correct_flags) != n:
        raise ValueError(f"got {n} scores but {len(correct_flags)} correctness flags")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n; got k={k}, n={n}")
    keyed = sorted(((float(s) if math.isfinite(float(s)) else -math.inf), bool(ok))
                   for s, ok in zip(scores, correct_flags))
    keyed.reverse()
    total, above, i, denom = 0.0, 0, 0, math.comb(n, k)
    while i < n:
        j = i
        while j < n and keyed[j][0] == keyed[i][0]:
            j += 1
        size, right = j - i, sum(ok for _, ok in keyed[i:j])
        if right:
            total += (math.comb(n - above, k) - math.comb(n - above - size, k)) / denom * right / size
        above += size
        i = j
    return total
