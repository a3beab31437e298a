"""Algorithms as pure tensor functions: advantage estimators, policy losses, KL estimators."""

from rlvr.algorithms.advantages import ADVANTAGES, group_normalized_advantages, group_stats
from rlvr.algorithms.kl import kl_penalty
from rlvr.algorithms.losses import LOSSES, aggregate_loss, masked_mean, ppo_clip_loss

__all__ = [
    "ADVANTAGES",
    "LOSSES",
    "aggregate_loss",
    "group_normalized_advantages",
    "group_stats",
    "kl_penalty",
    "masked_mean",
    "ppo_clip_loss",
]
