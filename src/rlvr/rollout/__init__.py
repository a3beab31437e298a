"""Rollout engines and the rollout stage."""

from rlvr.rollout import hf  # noqa: F401  (registration)
from rlvr.rollout.base import ENGINES, RolloutEngine, SamplingParams, rollout_groups

__all__ = ["ENGINES", "RolloutEngine", "SamplingParams", "rollout_groups"]
