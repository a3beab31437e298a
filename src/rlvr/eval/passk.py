"""pass@k with the unbiased estimator.

For a problem with n samples of which c are correct, the probability that at least one of k samples drawn
without replacement is correct is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

(Chen et al., "Evaluating Large Language Models Trained on Code", arXiv:2107.03374). The product form
never builds a large binomial coefficient, so it is exact enough for n and k in the thousands.
"""

from __future__ import annotations

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
