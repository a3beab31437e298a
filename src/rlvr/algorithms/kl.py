r"""KL divergence estimators between the policy and a frozen reference, per token.

With r = log pi_ref(a) - log pi(a) for a token a sampled from pi (Schulman, "Approximating KL Divergence",
http://joschu.net/blog/kl-approx.html):

    k1 = -r                  unbiased, high variance, can be negative
    k2 = r^2 / 2             biased, low variance
    k3 = exp(r) - r - 1      unbiased, low variance, always >= 0  (the GRPO paper's choice)
"""

from __future__ import annotations

from typing import Literal

import torch

KLEstimator = Literal["k1", "k2", "k3"]


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator = "k3") -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate. The log-ratio is clamped to [-20, 20] so exp cannot overflow."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        return torch.exp(log_ratio) - log_ratio - 1.0
    raise ValueError(f"unknown KL estimator '{estimator}'; expected k1, k2 or k3")
