"""Rewards of multi-turn (agentic) rollouts, read from what the agent loop recorded in `sample.meta`."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rlvr.rewards.base import REWARDS, CorrectnessReward, RewardOutput
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


@REWARDS.register("harness")
class HarnessReward(CorrectnessReward):
    """The reward of an agent harness behind the OpenAI-compatible endpoint (`rollout.mode=openai_server`):

        R = the number the harness returned                  (it scored the episode itself)
        R = verifier(last completion of the episode, record)  (it returned None)
        R = 0, with the reason                                (it raised, timed out or returned a non-number)

    as recorded by the harness rollout in `sample.meta` (`harness_reward`, `harness_error`). A harness reward
    counts as correct when it is at least `correct_threshold`. Verification runs as `correctness` does.
    """

    def __init__(self, *, workers: Annotated[int, Field(ge=0)] = 2, timeout: Annotated[float, Field(gt=0)] = 30.0,
                 correct_threshold: float = 1.0):
        super().__init__(workers=workers, timeout=timeout)
        self.correct_threshold = correct_threshold

    def score_batch(self, groups: list[Group], task: Any) -> list[list[RewardOutput]]:
        to_verify = [Group(record=g.record, prompt_ids=g.prompt_ids, prompt_text=g.prompt_text,
                           samples=[s for s in g.samples if _verdict(s) is None]) for g in groups]
        verified = iter([o for outs in super().score_batch([g for g in to_verify if g.samples], task) for o in outs])
        out = []
        for g in groups:
            row = []
            for s in g.samples:
                verdict = _verdict(s)
                if verdict is None:
                    row.append(next(verified))
                elif isinstance(verdict, str):
                    row.append(RewardOutput(0.0, verdict, False, failed=True))
                else:
                    row.append(RewardOutput(verdict, "harness reward", verdict >= self.correct_threshold))
            out.append(row)
        return out


def _verdict(sample: Any) -> float | str | None:
    """The harness's own score (a float), why the episode failed (a str), or None (the verifier decides)."""
    if sample.meta.get("harness_error"):
        return f"harness failed: {sample.meta['harness_error']}"
    value = sample.meta.get("harness_reward")
    return None if value is None else float(value)
