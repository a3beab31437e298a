r"""Token-level pieces a trainer composes with any loss: which tokens to train (`top_entropy_mask`), an
entropy bonus term, and truncated importance weights for the rollout engine's mismatch with the learner.
"""

from __future__ import annotations

import math

import torch


def top_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, *, ratio: float = 0.2) -> torch.Tensor:
    r"""Keep only the top-rho fraction of trained tokens by entropy (the "forking" tokens); the rest: mask 0.

        k      = ceil(rho * N_tokens)          N_tokens = number of tokens with mask 1 in the batch given
        mask'  = mask * 1[t among the k highest-entropy masked tokens]

    Source: Wang et al., "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement
    Learning for LLM Reasoning", arXiv:2506.01939: the policy gradient is computed only on the top 20% highest
    entropy tokens of each batch (rho = 0.2).

    This implementation: the selection is over every masked token of the tensors given (the paper's
    batch-level threshold), so the trainer should call it once on the whole rollout batch, not per
    micro-batch. Exactly k tokens are kept: ties are broken by position (row-major, earlier first), so the
    result is deterministic. Entropy is only read (no gradient). Apply to any loss by passing the result as
    its `mask` and to `aggregate_loss`.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"top_entropy_mask: ratio must be in (0, 1]; got {ratio}")
    valid = mask > 0
    n_valid = int(valid.sum())
    keep = torch.zeros_like(valid)
    if n_valid > 0:
        k = min(max(math.ceil(ratio * n_valid - 1e-9), 1), n_valid)  # the epsilon keeps 0.2 * 10 at 2, not 3
        scores = torch.where(valid, entropy.detach().to(torch.float64), torch.full(entropy.shape, -math.inf,
                             dtype=torch.float64, device=entropy.device)).reshape(-1)
        order = torch.sort(scores, descending=True, stable=True).indices[:k]
        keep.view(-1)[order] = True
    return mask * keep.to(mask.dtype)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Per-token entropy-bonus loss term: -H_t on trained tokens, 0 elsewhere.

        L_t = -H(pi(. | s_t)) * mask_t

    Minimizing coef * aggregate_loss(entropy_bonus(H, mask), mask, mode) raises the policy's entropy; `coef`
    can come from a `TargetEntropyController` (rlvr.algorithms.controllers). `entropy` must be differentiable.

    Source: the entropy bonus c_2 S[pi](s_t) of Schulman et al., "Proximal Policy Optimization Algorithms",
    arXiv:1707.06347 (eq. 9).
    """
    return -entropy * mask


def truncated_is_weights(
    old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, *, cap: float = 2.0
) -> torch.Tensor:
    r"""Truncated importance-sampling weights correcting the rollout engine's mismatch with the learner.

        w_t = min(pi_old(a_t) / pi_behaviour(a_t), C) * mask_t         (no gradient)

    pi_old is the learner's own recomputation of the sampling policy and pi_behaviour the rollout engine's
    (vLLM's, say) log-probs for the same tokens; multiply a loss's per-token value by w_t.

    Source: Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training" (blog, 2025,
    https://fengyao.notion.site/off-policy-rl), truncated importance sampling with C = 2; the same rule is
    verl's rollout correction with `rollout_is_threshold: 2.0` (verl docs/algo/rollout_corr.md).
    """
    if not cap > 0:
        raise ValueError(f"truncated_is_weights: cap must be > 0; got {cap}")
    log_w = (old_logprobs - behaviour_logprobs).detach().clamp(max=math.log(cap))
    return torch.exp(log_w) * mask
