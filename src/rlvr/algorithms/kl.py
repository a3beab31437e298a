r"""KL divergence estimators between the policy and a frozen reference, per token.

Tokens a are sampled from the policy pi (the rollout). Reverse KL, KL(pi || pi_ref), with r = log pi_ref(a) -
log pi(a) (Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html):

    k1 = -r                  unbiased, high variance, can be negative
    k2 = r^2 / 2             biased, low variance
    k3 = exp(r) - r - 1      unbiased, low variance, always >= 0  (the GRPO paper's choice)

Forward KL, KL(pi_ref || pi), estimated from the same samples of pi by importance weighting with
w = pi_ref(a) / pi(a) = exp(r), since KL(pi_ref || pi) = E_pi[w log w]:

    forward_k1 = sg[w] * r                 value w log w: unbiased, can be negative
    forward_k3 = sg[w] * r - (sg[w] - 1)   value w log w - w + 1: unbiased (E_pi[w] = 1), always >= 0

In both, the weight is held constant (sg = stop-gradient), so the gradient with respect to log pi(a) is -w: in
expectation -E_pi_ref[grad log pi], the exact gradient of KL(pi_ref || pi). (The reverse estimators' value is
differentiated as written: k3's gradient is (1 - w) * grad log pi.) The forward direction is RAPO's choice:
Deng et al., "Unlocking Reasoning Capabilities in LLMs via Reinforcement Learning Exploration",
arXiv:2510.03865, replace GRPO's reverse KL with the forward KL penalty, which is mass-covering rather than
mode-seeking, so the policy may put mass where the reference has little. This implementation: I could not read
RAPO's exact estimator; the one above is the standard importance-weighted estimator with samples from pi
(Schulman's note, with the roles of p and q swapped), and RAPO's reward-aware reweighting of the reference is
not part of it.

Every log-ratio is clamped to [-20, 20] so `exp` cannot overflow.
"""

from __future__ import annotations

from typing import Literal

import torch

KLEstimator = Literal["k1", "k2", "k3", "forward_k1", "forward_k3"]
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3", "forward_k1", "forward_k3")


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator = "k3") -> torch.Tensor:
    """Per-token KL estimate: reverse KL(pi || pi_ref) for k1/k2/k3, forward KL(pi_ref || pi) for forward_*.

    `logprobs` are the policy's log-probs of tokens sampled from the policy, `ref_logprobs` the reference's
    log-probs of the same tokens. The log-ratio is clamped to [-20, 20] so exp cannot overflow.
    """
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        return torch.exp(log_ratio) - log_ratio - 1.0
    if estimator in ("forward_k1", "forward_k3"):
        weight = torch.exp(log_ratio).detach()  # pi_ref / pi, held constant: the gradient is -weight
        forward = weight * log_ratio
        return forward if estimator == "forward_k1" else forward - (weight - 1.0)
    raise ValueError(f"unknown KL estimator '{estimator}'; expected k1, k2 or k3 (reverse KL, "
                     "KL(pi || pi_ref)) or forward_k1, forward_k3 (forward KL, KL(pi_ref || pi))")
