r"""The advantage-estimator registry and the pure helpers the estimator families share.

Family modules import from here, never from the package `__init__`, so there is no import cycle.
Sums and statistics are taken in float64.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field

from rlvr.registry import Registry

ADVANTAGES: Registry = Registry("advantage estimator")


def group_stats(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group mean, unbiased group std (0 for a group of one) and group size, broadcast to [N]."""
    values = values.to(torch.float64)
    num_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    counts = torch.bincount(group_ids, minlength=num_groups).to(values.dtype)
    sums = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, group_ids, values)
    mean = sums / counts.clamp(min=1)
    sq_dev = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(
        0, group_ids, (values - mean[group_ids]) ** 2)
    std = (sq_dev / (counts - 1).clamp(min=1)).sqrt()
    return mean[group_ids], std[group_ids], counts[group_ids]


NonNegative = Annotated[float, Field(ge=0)]
Discount = Annotated[float, Field(ge=0, le=1)]


def _out_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The first floating dtype among `tensors` (the reward's), else float32."""
    for t in tensors:
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def _group_sums(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Per-sample sum of `values` over the sample's group, broadcast to [N] (float64)."""
    values = values.to(torch.float64)
    num_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    sums = torch.zeros(num_groups, dtype=torch.float64, device=values.device).index_add_(0, group_ids, values)
    return sums[group_ids]


def _grpo64(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float) -> torch.Tensor:
    """GRPO's (r - mean_group) / (std_group + eps) in float64; 0 for a group of one or all-equal rewards."""
    mean, std, _ = group_stats(rewards, group_ids)
    return (rewards.to(torch.float64) - mean) / (std + eps)


def _masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries of the whole batch (population std); 0 outside the mask.

    An all-equal (or single-token) batch has numerator 0, so it maps to 0 rather than NaN.
    """
    x = x.to(torch.float64)
    m = mask.to(torch.float64)
    n = m.sum()
    if n == 0:
        return torch.zeros_like(x)
    mean = (x * m).sum() / n
    var = (((x - mean) * m) ** 2).sum() / n
    return torch.where(m > 0, (x - mean) / var.sqrt().clamp(min=eps), 0.0)


def sigma_filter(whitened: torch.Tensor, limit: float | None) -> torch.Tensor:
    """StableReinforce's advantage filter (R1-Reward, arXiv:2505.02835): zero every whitened advantage with
    |A| > limit (limit standard deviations from the batch mean; the paper's 3-sigma rule is limit = 3).

    The filtered tokens are zeroed after whitening, and the mean and std are NOT recomputed without them: the
    authors' code (yfzhang114/r1_reward, replay_buffer.py `normalize`) whitens over every token, then zeroes the
    outliers. `limit=None` returns the input unchanged.
    """
    if limit is None:
        return whitened
    return torch.where(whitened.abs() > limit, torch.zeros_like(whitened), whitened)


def _reverse_discounted_sum(x: torch.Tensor, mask: torch.Tensor, discount: float) -> torch.Tensor:
    """y_t = x_t + discount * y_{t'} along each row, where t' is the next masked position after t.

    Only masked positions are steps of the trajectory (unmasked ones, e.g. prompt, padding or tool-observation
    tokens, are skipped and get 0), so a response may start at any offset and may have gaps.
    """
    m = mask > 0
    x = torch.where(m, x.to(torch.float64), 0.0)
    if discount == 1.0:  # exact and loop-free: a reverse cumulative sum over the masked entries
        return x.flip(-1).cumsum(-1).flip(-1) * m
    out = torch.zeros_like(x)
    running = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    for t in range(x.shape[1] - 1, -1, -1):
        running = torch.where(m[:, t], x[:, t] + discount * running, running)
        out[:, t] = torch.where(m[:, t], running, 0.0)
    return out
