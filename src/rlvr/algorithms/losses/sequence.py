r"""Sequence-level importance ratios: GSPO's one length-normalized ratio per response, clipped per sequence."""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field

from rlvr.algorithms.losses.common import (
    _LOG_RATIO_BOUND,
    LOSSES,
    _clipped_surrogate,
    zero_grad_at_zero_advantage,
)


@LOSSES.register("gspo")
@zero_grad_at_zero_advantage
def gspo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 3e-4,
    clip_high: Annotated[float, Field(ge=0.0)] = 4e-4,
    variant: Literal["sequence", "token"] = "sequence",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""GSPO: one length-normalized importance ratio per sequence, clipped at the sequence level.

        s_i       = (pi(y_i) / pi_old(y_i))^(1/|y_i|)
                  = exp( 1/|y_i| * sum_t (log pi(y_it) - log pi_old(y_it)) )
        sequence:  L_i  = -min(s_i * A_i, clip(s_i, 1 - eps_low, 1 + eps_high) * A_i)   (broadcast to tokens)
        token:     s_it = sg[s_i] * pi(y_it) / sg[pi(y_it)]
                   L_it = -min(s_it * A_it, clip(s_it, 1 - eps_low, 1 + eps_high) * A_it)

    The sums run over the sequence's masked tokens only. GSPO-token has the value of s_i on every token but
    the gradient of its own log-prob: d s_it / d log pi(y_it) = s_i, so with A_it = A_i its gradient equals
    the sequence variant's, and it accepts per-token advantages.

    Source: Zheng et al., "Group Sequence Policy Optimization", arXiv:2507.18071 (the GSPO objective and
    GSPO-token); the paper's clip ranges are 3e-4 (left) and 4e-4 (right). Cross-checked with verl's
    `compute_policy_loss_gspo` (verl/trainer/ppo/core_algos.py).

    Aggregation: use `seq_mean_token_mean` (the paper's 1/G sum_i L_i; for the token variant
    1/G sum_i 1/|y_i| sum_t L_it). The ratio is a per-row statistic, so micro-batching by rows is exact.
    This implementation: the sequence variant uses each token's A_it inside the min; pass advantages that are
    constant over a sequence (outcome rewards) to get exactly the paper's sequence objective. A fully masked
    row has s_i = 1 (and contributes nothing after masking).

    Diagnostics: `clipped` (sequence-level, broadcast), `ratio` (s_i, broadcast).
    """
    valid = mask > 0
    token_log_ratio = torch.where(valid, logprobs - old_logprobs, torch.zeros_like(logprobs))
    lengths = valid.sum(dim=1, keepdim=True).clamp(min=1).to(logprobs.dtype)
    seq_log_ratio = (token_log_ratio.sum(dim=1, keepdim=True) / lengths).clamp(-_LOG_RATIO_BOUND,
                                                                                 _LOG_RATIO_BOUND)
    if variant == "sequence":
        ratio = torch.exp(seq_log_ratio).expand_as(logprobs)
    elif variant == "token":
        ratio = torch.exp(seq_log_ratio.detach() + logprobs - logprobs.detach())
    else:
        raise ValueError(f"unknown GSPO variant '{variant}'; expected 'sequence' or 'token'")
    loss, was_clipped = _clipped_surrogate(ratio, advantages, 1.0 - clip_low, 1.0 + clip_high, None)
    return loss, {"clipped": was_clipped.to(logprobs.dtype), "ratio": ratio.detach()}
