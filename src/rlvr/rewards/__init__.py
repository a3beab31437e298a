"""Rewards: the registry of reward components, the weighted combination, and verifier helpers."""

from rlvr.rewards.base import REWARDS, CorrectnessReward, RewardComponent, RewardFunction, RewardOutput

__all__ = ["REWARDS", "CorrectnessReward", "RewardComponent", "RewardFunction", "RewardOutput"]
