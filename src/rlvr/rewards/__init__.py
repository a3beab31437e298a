"""Rewards: the registry of reward components, their weighted combination, and verifier helpers.

Importing this package registers the built-in components: correctness (the task's verifier), shaping
(format, overlong, lead_length, concise_length, otc), agent (env_reward), label-free (ttrl, ttrv, evol_rl, co_reward, rlpr,
self_certainty, gui_rcpo), temporal (t_grpo), model-based (reward_model, judge) and process rewards (step_rar,
step_rvr, trust_thinking) and the user's own Python function (python).
"""

from rlvr.rewards import agent, ecosystem, label_free, models, process, python, shaping, temporal  # noqa: F401  (registration)
from rlvr.rewards.base import (
    REWARDS,
    CorrectnessReward,
    RewardComponent,
    RewardContext,
    RewardFunction,
    RewardOutput,
    non_finite_metrics,
)

__all__ = ["REWARDS", "CorrectnessReward", "RewardComponent", "RewardContext", "RewardFunction", "RewardOutput",
           "non_finite_metrics"]
