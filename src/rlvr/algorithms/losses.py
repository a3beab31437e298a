r"""Policy losses, token by token, and how per-token losses are reduced to one number.

A loss returns a per-token loss [B, T] (zero where `mask` is 0 is not required; the reducer masks) and a dict
of per-token diagnostic tensors. The reduction is separate (`aggregate_loss`) so that gradient accumulation
over micro-batches divides by the mini-batch's totals, making the result independent of micro-batching.
"""

from __future__ import annotations

from typing import Literal

import torch

from rlvr.registry import Registry

LOSSES: Registry = Registry("policy loss")

LossAggregation = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"]


@LOSSES.register("ppo_clip")
def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""PPO's clipped surrogate, per token (GRPO uses it at token level).

        ratio_t = exp(log pi(a_t) - log pi_old(a_t))
        L_t     = -min(ratio_t * A_t, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A_t)

    `clip_low == clip_high` is the symmetric clip of Schulman et al., "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347. A larger `clip_high` is DAPO's clip-higher (arXiv:2503.14476).

    Diagnostics: `clipped` marks tokens whose gradient the clip removed; `ratio` is the importance ratio.
    """
    log_ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0)  # guard exp against far-off-policy tokens
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (clipped < unclipped).to(logprobs.dtype)
    return loss, {"clipped": was_clipped, "ratio": ratio.detach()}


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggregation = "token_mean",
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> torch.Tensor:
    r"""Reduce a per-token loss [B, T] to a scalar.

    - `token_mean`: sum over all tokens / number of tokens (DAPO's token-level loss).
    - `seq_mean_token_mean`: mean over tokens within each sequence, then over sequences (original GRPO).
    - `seq_mean_token_sum`: sum over tokens within each sequence, mean over sequences.

    `num_tokens` / `num_seqs` override the denominators; gradient accumulation passes the mini-batch's
    totals so that micro-batches add up to exactly the full mini-batch loss.
    """
    masked = per_token * mask
    if mode == "token_mean":
        denom = mask.sum() if num_tokens is None else num_tokens
        return masked.sum() / max(float(denom), 1.0)
    seq_tokens = mask.sum(dim=1)
    if mode == "seq_mean_token_mean":
        per_seq = masked.sum(dim=1) / seq_tokens.clamp(min=1.0)
    elif mode == "seq_mean_token_sum":
        per_seq = masked.sum(dim=1)
    else:
        raise ValueError(f"unknown loss aggregation '{mode}'")
    denom = (seq_tokens > 0).sum() if num_seqs is None else num_seqs
    return per_seq.sum() / max(float(denom), 1.0)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
