"""Rewards of multi-turn (agentic) rollouts, read from what the agent loop recorded in `sample.meta`."""

from __future__ import annotations

from typing import Any

from rlvr.rewards.base import REWARDS, RewardOutput
from rlvr.types import Group


@REWARDS.register("env_reward")
class EnvironmentReward:
    r"""The environment's per-turn rewards summed over the episode:

        R = sum_t (env_reward_scale * r_t - tool_error_penalty * errors_t - turn_penalty)

    with the scale and penalties from the `agent:` section, as recorded by the agent rollout in
    `sample.meta["env_reward"]` (0 for single-turn samples). A game environment pays out here (e.g.
    guess_number's win reward); the tools environment pays nothing itself, so this carries only the penalties.
    """

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        out = []
        for s in group.samples:
            value = float(s.meta.get("env_reward", 0.0))
            turns = s.meta.get("turns")
            out.append(RewardOutput(value, f"env reward over {turns} turns" if turns else "no agent episode"))
        return out
