r"""Group-relative estimators: each sample is scored against the other samples of its prompt.

GRPO (mean and std of the group), Dr. GRPO (mean only), RLOO (leave-one-out mean) and Lite PPO (group mean,
batch std). All return one advantage per sample, [N]; a group of one or with all-equal rewards gets 0.
"""

from __future__ import annotations

from typing import Literal

import torch

from rlvr.algorithms.advantages.common import ADVANTAGES, NonNegative, _group_sums, _out_dtype, group_stats


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
        scale = rewards.to(torch.float64).std(unbiased=True) + eps if rewards.numel() > 1 else 1.0
    else:
        scale = torch.ones_like(centered)
    return (centered / scale).to(rewards.dtype if rewards.is_floating_point() else torch.float32)


# Estimators that compare samples within a group need at least two samples per prompt.
group_normalized_advantages.needs_group = True  # type: ignore[attr-defined]


@ADVANTAGES.register("dr_grpo")
def dr_grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    r"""Dr. GRPO: GRPO's group baseline without the std division.

        A_i = r_i - mean_{j in group(i)} r_j

    A group whose rewards are all equal, or a group of one sample, gets 0. (Dr. GRPO's other half, dropping the
    1/|o_i| length normalization, is a loss-aggregation choice, not an advantage.)

    Source: Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv:2503.20783;
    matches OpenRLHF's `dr_grpo` estimator
    (OpenRLHF/OpenRLHF openrlhf/trainer/ppo_utils/experience_maker.py).
    """
    mean, _, _ = group_stats(rewards, group_ids)
    return (rewards.to(torch.float64) - mean).to(_out_dtype(rewards))


dr_grpo_advantages.needs_group = True  # type: ignore[attr-defined]


@ADVANTAGES.register("rloo")
def rloo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    r"""REINFORCE Leave-One-Out: each sample's baseline is the mean of the *other* samples of its prompt.

        A_i = r_i - 1/(k-1) \sum_{j != i} r_j  =  k/(k-1) (r_i - mean_group),    k = group size

    The baseline excludes r_i, so it is independent of the sample it scores (unbiased). A group of one has no
    other sample and gets 0.

    Source: Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human
    Feedback in LLMs", arXiv:2402.14740 (RLOO); estimator from Kool et al., "Buy 4 REINFORCE
    Samples, Get a Baseline for Free!" (ICLR 2019 workshop). Same as OpenRLHF's `rloo`.
    """
    r = rewards.to(torch.float64)
    _, _, counts = group_stats(rewards, group_ids)
    others = _group_sums(r, group_ids) - r
    adv = torch.where(counts > 1, r - others / (counts - 1).clamp(min=1), torch.zeros_like(r))
    return adv.to(_out_dtype(rewards))


rloo_advantages.needs_group = True  # type: ignore[attr-defined]


@ADVANTAGES.register("lite_ppo")
def lite_ppo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    eps: NonNegative = 1e-6,
) -> torch.Tensor:
    r"""Lite PPO's advantage normalization: group-level mean, batch-level std.

        A_i = (r_i - mean_{j in group(i)} r_j) / (std_{j in batch} r_j + eps)

    with the unbiased std of the raw rewards of the whole batch (1 for a batch of one sample). All-equal groups
    and groups of one get 0. (Lite PPO's other half, token-level loss aggregation, is a loss choice.)

    Source: Liu et al., "Part I: Tricks or Traps? A Deep Dive into RL for LLM Reasoning", arXiv:2508.08221
    (Lite PPO); checked against ROLL's `reward_norm(norm_mean_type="group",
    norm_std_type="batch")` (alibaba/ROLL roll/utils/functionals.py). This equals `grpo` with std_scope="batch".
    """
    return group_normalized_advantages(rewards, group_ids, std_scope="batch", eps=eps)


lite_ppo_advantages.needs_group = True  # type: ignore[attr-defined]
