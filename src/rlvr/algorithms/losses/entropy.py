r"""The entropy mechanism: losses that act on the tokens whose log-prob/advantage covariance drives entropy
collapse (Clip-Cov detaches their gradient, KL-Cov adds a KL penalty on them).
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
from pydantic import Field

from rlvr.algorithms.losses.common import LOSSES, _clipped_surrogate, _log_ratio


def token_covariance(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Per-token centered covariance between log-prob and advantage, over the masked tokens given (no grad).

        Cov_t = (log pi(a_t) - mean_s log pi(a_s)) * (A_t - mean_s A_s)            s over tokens with mask 1

    Outside the mask the value is 0. The means are over the tensors passed in (the micro-batch).

    Source: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
    arXiv:2505.22617 (the entropy change under policy gradient follows this covariance).
    """
    valid = mask > 0
    n = valid.sum().clamp(min=1)
    logp = torch.where(valid, logprobs.detach(), torch.zeros_like(logprobs))
    adv = torch.where(valid, advantages.detach(), torch.zeros_like(advantages))
    cov = (logp - logp.sum() / n) * (adv - adv.sum() / n)
    return torch.where(valid, cov, torch.zeros_like(cov))


@LOSSES.register("clip_cov")
def clip_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 2e-4,
    cov_low: float = 1.0,
    cov_high: float = 5.0,
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0,
    clip_high: Annotated[float, Field(ge=0.0)] = 1.0,
    seed: int = 0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""Clip-Cov: detach the gradient of a few random tokens whose log-prob/advantage covariance is high.

        Cov_t   = (log pi(a_t) - mean log pi) * (A_t - mean A)
        I_clip  = a random subset of {t : cov_low < Cov_t < cov_high, not already clipped},
                  of size max(1, floor(clip_ratio * N_tokens))
        L_t     = sg[ppo_t]  if t in I_clip  else  ppo_t
        ppo_t   = -min(r_t A_t, clip(r_t, 1 - clip_low, 1 + clip_high) A_t)

    Source: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
    arXiv:2505.22617 (section 4, Clip-Cov; entropy change is driven by this covariance, so removing the
    gradient of high-covariance tokens slows entropy collapse). Defaults from the authors' scripts
    (github.com/PRIME-RL/Entropy-Mechanism-of-RL recipe/dapo/7b_clip_cov.sh: clip_cov_ratio = 2e-4, bounds
    1 and 5, and clip_ratio_low = clip_ratio_high = 1, i.e. a loose PPO clip). Selection as in their
    `compute_policy_loss_clip_cov` (also verl's `clip_cov`).

    This implementation: the statistics (means, token count) are over the tensors given, i.e. the micro-batch,
    as in the reference code. Selected tokens keep their loss value but lose their gradient (`sg`, the paper's
    "detach"); the reference code zeroes them, which differs only in the logged loss. Randomness is a fresh
    `torch.Generator().manual_seed(seed)` per call: the same inputs give the same selection, and the selection
    does not depend on any global RNG state.

    Diagnostics: `clipped` (PPO clip or covariance detach), `cov_detached`, `cov`, `ratio`.
    """
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    ppo, ppo_clipped = _clipped_surrogate(ratio, advantages, 1.0 - clip_low, 1.0 + clip_high, None)
    valid = mask > 0
    cov = token_covariance(logprobs, advantages, mask)
    candidates = valid & ~ppo_clipped & (cov > cov_low) & (cov < cov_high)
    flat = torch.nonzero(candidates.reshape(-1), as_tuple=True)[0]
    detach = torch.zeros_like(valid)
    n_valid = int(valid.sum())
    if flat.numel() > 0 and n_valid > 0:
        n_pick = min(max(int(clip_ratio * n_valid), 1), flat.numel())
        generator = torch.Generator().manual_seed(seed)  # on the CPU: the same picks on any device
        picked = flat[torch.randperm(flat.numel(), generator=generator, device="cpu")[:n_pick].to(flat.device)]
        detach.view(-1)[picked] = True
    loss = torch.where(detach, ppo.detach(), ppo)
    return loss, {"clipped": (ppo_clipped | detach).to(logprobs.dtype),
                  "cov_detached": detach.to(logprobs.dtype), "cov": cov, "ratio": ratio.detach()}


@LOSSES.register("kl_cov")
def kl_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    kl_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 2e-3,
    kl_coef: Annotated[float, Field(ge=0.0)] = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""KL-Cov: a KL penalty to the old policy on the top-k tokens by log-prob/advantage covariance.

        Cov_t  = (log pi(a_t) - mean log pi) * (A_t - mean A)
        I_KL   = the max(1, floor(kl_ratio * N_tokens)) tokens with the largest Cov_t
        L_t    = -r_t A_t + beta * |log pi(a_t) - log pi_old(a_t)|   if t in I_KL           beta = kl_coef
                 -r_t A_t                                            otherwise

    Source: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
    arXiv:2505.22617 (section 4, KL-Cov). The KL estimate |log r| and the unclipped surrogate -r*A follow the
    authors' `compute_policy_loss_kl_cov` (github.com/PRIME-RL/Entropy-Mechanism-of-RL, also verl's `kl_cov`).
    Defaults: k = 0.2% (their 7B script's k_percent = 0.2), beta = 1.

    This implementation: statistics are over the tensors given (the micro-batch), as in the reference code;
    ties in Cov are broken by token position (a stable sort), so the selection is deterministic.

    Diagnostics: `kl_penalized` (the selected tokens), `cov`, `ratio`.
    """
    log_ratio = _log_ratio(logprobs, old_logprobs)
    ratio = torch.exp(log_ratio)
    pg = -ratio * advantages
    valid = mask > 0
    cov = token_covariance(logprobs, advantages, mask)
    selected = torch.zeros_like(valid)
    n_valid = int(valid.sum())
    if n_valid > 0:
        k = max(int(kl_ratio * n_valid), 1)
        scores = torch.where(valid, cov, torch.full_like(cov, -math.inf)).reshape(-1)
        order = torch.sort(scores, descending=True, stable=True).indices[:k]
        selected.view(-1)[order] = True
    loss = torch.where(selected, pg + kl_coef * log_ratio.abs(), pg)
    return loss, {"kl_penalized": selected.to(logprobs.dtype), "cov": cov, "ratio": ratio.detach()}


@LOSSES.register("entropy_min")
def entropy_min_loss(
    entropy: torch.Tensor,
    mask: torch.Tensor,
    *,
    coef: Annotated[float, Field(gt=0.0)] = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""Entropy minimisation: lower the policy's token entropy on its own samples; no reward, no advantage.

        L_t = coef * H(pi(. | x, y_<t))          on the sampled (trained) tokens; aggregated by `loss_agg`

    The gradient flows through the full distribution at each position (the entropy is computed from the
    learner's logits in the forward pass, so it is differentiable), not through the sampled token's log-prob:
    it sharpens whatever the policy already prefers. Rewards may still be computed and logged (e.g.
    correctness at weight 0 for the accuracy metric); they do not enter this loss.

    Source: Agarwal et al., "The Unreasonable Effectiveness of Entropy Minimization in LLM Reasoning",
    arXiv:2505.15134 (EM-FT, eq. 2: token-level entropy on self-generated outputs), and Gao et al., "One-shot
    Entropy Minimization", arXiv:2505.20282 (the same loss on a single unlabeled prompt).

    This implementation: `entropy` is the learner's per-token entropy at the sampling temperature. The loss
    never reads advantages, so rows with zero advantage are never skipped.

    Diagnostics: none beyond the learner's own `entropy`.
    """
    return coef * entropy * mask, {}
