r"""How per-token losses are reduced to one number.

The reduction is separate from the losses so that gradient accumulation over micro-batches divides by the
mini-batch's totals, making the result independent of micro-batching.
"""

from __future__ import annotations

from typing import Literal

import torch

LossAggregation = Literal[
    "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"
]


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggregation = "token_mean",
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    constant_length: float | None = None,
) -> torch.Tensor:
    r"""Reduce a per-token loss [B, T] to a scalar.

    - `token_mean`: sum over all tokens / number of tokens (DAPO's token-level loss, Yu et al., "DAPO: An
      Open-Source LLM Reinforcement Learning System at Scale", arXiv:2503.14476).
    - `seq_mean_token_mean`: mean over tokens within each sequence, then over sequences (original GRPO,
      Shao et al., arXiv:2402.03300).
    - `seq_mean_token_sum`: sum over tokens within each sequence, mean over sequences.
    - `seq_mean_token_sum_norm`: sum over all tokens / (num_seqs * L), with the constant L = `constant_length`
      (e.g. the generation budget), or the mask's width T when None. This is Dr.GRPO's length-unbiased
      normalizer, Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv:2503.20783.

    `num_tokens` / `num_seqs` override the denominators; gradient accumulation passes the mini-batch's
    totals so that micro-batches add up to exactly the full mini-batch loss. For `seq_mean_token_sum_norm`
    also pass `constant_length`: micro-batches may be padded to different widths T.
    """
    masked = per_token * mask
    if mode == "token_mean":
        denom = mask.sum() if num_tokens is None else num_tokens
        return masked.sum() / max(float(denom), 1.0)
    seq_tokens = mask.sum(dim=1)
    if mode == "seq_mean_token_mean":
        per_seq = masked.sum(dim=1) / seq_tokens.clamp(min=1.0)
    elif mode in ("seq_mean_token_sum", "seq_mean_token_sum_norm"):
        per_seq = masked.sum(dim=1)
    else:
        raise ValueError(f"unknown loss aggregation '{mode}'; expected token_mean, seq_mean_token_mean, "
                         "seq_mean_token_sum or seq_mean_token_sum_norm")
    denom = (seq_tokens > 0).sum() if num_seqs is None else num_seqs
    if mode == "seq_mean_token_sum_norm":
        length = float(mask.shape[-1]) if constant_length is None else float(constant_length)
        if not length > 0:
            raise ValueError(f"seq_mean_token_sum_norm: constant_length must be > 0; got {constant_length}")
        return per_seq.sum() / (max(float(denom), 1.0) * length)
    return per_seq.sum() / max(float(denom), 1.0)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum_t values_t * mask_t / max(sum_t mask_t, 1): the mean over masked entries (0 when none)."""
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
