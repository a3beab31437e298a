"""Algorithms as pure tensor functions: advantage estimators, policy losses, KL estimators, controllers.

Importing this package registers every estimator (`ADVANTAGES`) and loss (`LOSSES`); see `inputs.py` for how
the trainer feeds them.
"""

from rlvr.algorithms import distill, guidance  # noqa: F401  (register the teacher and off-policy guidance losses)
from rlvr.algorithms.advantages import ADVANTAGES, gae_returns, group_normalized_advantages, group_stats
from rlvr.algorithms.controllers import AdaptiveKLController, FixedKLController, TargetEntropyController
from rlvr.algorithms.kl import KL_ESTIMATORS, kl_penalty
from rlvr.algorithms.losses import (
    LOSSES,
    aggregate_loss,
    masked_mean,
    ppo_clip_loss,
    top_entropy_mask,
    truncated_is_weights,
)

__all__ = [
    "ADVANTAGES",
    "KL_ESTIMATORS",
    "LOSSES",
    "AdaptiveKLController",
    "FixedKLController",
    "TargetEntropyController",
    "aggregate_loss",
    "gae_returns",
    "group_normalized_advantages",
    "group_stats",
    "kl_penalty",
    "masked_mean",
    "ppo_clip_loss",
    "top_entropy_mask",
    "truncated_is_weights",
]
