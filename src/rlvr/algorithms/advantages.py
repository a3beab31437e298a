"""Advantage estimators: pure functions from per-sample rewards (and group ids) to advantages.

Each estimator takes `rewards` [N] and `group_ids` [N] (samples of one prompt share a group id) and returns
advantages [N]. Config parameters are keyword-only; they are bound once, at registry lookup.
"""

from __future__ import annotations

from typing import Literal

import torch

from rlvr.registry import Registry

ADVANTAGES: Registry = Registry("advantage estimator")


def group_stats(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group mean, unbiased group std (0 for a group of one) and group size, broadcast to [N]."""
    values = values.to(torch.float64)
    num_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    counts = torch.bincount(group_ids, minlength=num_groups).to(values.dtype)
    sums = torch.zeros(num_groups, dtype=values.dtype).index_add_(0, group_ids, values)
    mean = sums / counts.clamp(min=1)
    sq_dev = torch.zeros(num_groups, dtype=values.dtype).index_add_(0, group_ids, (values - mean[group_ids]) ** 2)
    std = (sq_dev / (counts - 1).clamp(min=1)).sqrt()
    return mean[group_ids], std[group_ids], counts[group_ids]


@ADVANTAGES.register("grpo")
def group_normalized_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    std_scope: Literal["group", "batch", "none"] = "group",
    eps: float = 1e-6,
) -> torch.Tensor:
    r"""GRPO's group-normalized advantage.

        A_i = (r_i - mean(r_group)) / (std + eps)

    where std is the unbiased std of the sample's group (`std_scope="group"`, the paper's choice), of the
    whole batch (`"batch"`), or 1 (`"none"`). A group whose rewards are all equal gets advantage 0, and a
    group of one sample gets 0 (its own mean is its baseline).

    Source: Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
    Models", arXiv:2402.03300, section 4.1.2 (outcome supervision).
    """
    mean, std, _ = group_stats(rewards, group_ids)
    centered = rewards.to(torch.float64) - mean
    if std_scope == "group":
        scale = std + eps
    elif std_scope == "batch":
        scale = rewards.to(torch.float64).std(unbiased=True) + eps if rewards.numel() > 1 else torch.tensor(1.0)
    else:
        scale = torch.ones_like(centered)
    return (centered / scale).to(rewards.dtype if rewards.is_floating_point() else torch.float32)


# Estimators that compare samples within a group need at least two samples per prompt.
group_normalized_advantages.needs_group = True  # type: ignore[attr-defined]
