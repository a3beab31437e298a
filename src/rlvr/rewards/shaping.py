"""Shaping rewards: format, overlong punishment, length penalties and tool efficiency.

They are usually added to `correctness` with a weight, e.g.

    rewards:
      - {name: correctness, weight: 1.0}
      - {name: overlong, weight: 1.0, buffer: 32}
      - {name: format, weight: 0.1, gate: correctness}    # G-RA: format counts only for correct answers
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import Field

from rlvr.rewards.base import REWARDS, RewardContext, RewardOutput
from rlvr.types import Group


@REWARDS.register("format")
class FormatReward:
    r"""1 if the response matches `pattern` (a regular expression, searched with DOTALL), else 0.

    The default asks for DeepSeek-R1's layout: `<think>...</think>` followed by `<answer>...</answer>`
    (DeepSeek-AI, "DeepSeek-R1: Incentivizing Reasoning Capability in LLMs via Reinforcement Learning",
    arXiv:2501.12948, section 2.2.2 "format rewards").
    """

    def __init__(self, *, pattern: str = r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$"):
        try:
            self.regex = re.compile(pattern, re.DOTALL)
        except re.error as err:
            raise ValueError(f"rewards.format.pattern: not a valid regular expression: {err}") from None

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        return [RewardOutput(1.0, "format ok") if self.regex.search(s.text) else RewardOutput(0.0, "format mismatch")
                for s in group.samples]


@REWARDS.register("overlong")
class OverlongPunishment:
    r"""DAPO's soft overlong punishment, by response length L in tokens:

        R(L) = 0                                   if L <= L_max - L_cache
             = ((L_max - L_cache) - L) / L_cache   if L_max - L_cache < L <= L_max
             = -1                                  if L > L_max (or the response was cut off)

    L_max defaults to `rollout.max_new_tokens`; L_cache is `buffer`. Source: Yu et al., "DAPO: An Open-Source LLM
    Reinforcement Learning System at Scale", arXiv:2503.14476, eq. 13.
    """

    def __init__(self, context: RewardContext, *, max_length: Annotated[int, Field(ge=1)] | None = None,
                 buffer: Annotated[int, Field(ge=1)] = 32):
        self.max_length = max_length or context.max_new_tokens
        self.buffer = min(buffer, self.max_length)

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        out = []
        start = self.max_length - self.buffer
        for s in group.samples:
            n = len(s.response_ids)
            if s.truncated or n > self.max_length:
                out.append(RewardOutput(-1.0, f"overlong: {n} tokens, cut off"))
            elif n <= start:
                out.append(RewardOutput(0.0, "length ok"))
            else:
                out.append(RewardOutput((start - n) / self.buffer, f"soft overlong: {n} tokens"))
        return out


@REWARDS.register("lead_length")
class LeadLengthReward:
    r"""GRPO-LEAD's length-dependent accuracy reward. Within a group, with mu and sigma the mean and std of
    the lengths of the *correct* responses and z_i = (L_i - mu) / (sigma + eps):

        R_i = exp(-alpha * z_i)   if response i is correct
            = -1                  otherwise (the paper's explicit penalty for wrong answers)

    Use it in place of `correctness` (with correctness at weight 0 to keep the accuracy metric), since it
    already encodes correctness. Source: Zhang et al., "GRPO-LEAD: A Difficulty-Aware Reinforcement Learning
    Approach for Concise Mathematical Reasoning in Language Models", arXiv:2504.09696, section 3.1.
    """

    def __init__(self, *, alpha: Annotated[float, Field(ge=0)] = 0.05, wrong_reward: float = -1.0,
                 eps: float = 1e-6):
        self.alpha, self.wrong_reward, self.eps = alpha, wrong_reward, eps

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        correct = [_is_correct(s, group, task) for s in group.samples]
        lengths = [len(s.response_ids) for s in group.samples]
        ok = [n for n, c in zip(lengths, correct) if c]
        mu = sum(ok) / len(ok) if ok else 0.0
        sigma = math.sqrt(sum((n - mu) ** 2 for n in ok) / len(ok)) if ok else 0.0
        out = []
        for n, c in zip(lengths, correct):
            if c:
                z = (n - mu) / (sigma + self.eps)
                out.append(RewardOutput(math.exp(-self.alpha * z), f"correct, length z={z:.2f}", True))
            else:
                out.append(RewardOutput(self.wrong_reward, "wrong", False))
        return out


@REWARDS.register("concise_length")
class ConciseLengthReward:
    r"""ConciseR's length-aware reward (stage 2, L-GRPO): when *every* response in the group is correct,
    shorter ones earn more:

        R_i = 1 - L_i / L_max     if all responses of the group are correct
            = 0                   otherwise (accuracy is still being learned: no length pressure)

    with L_max = `max_length` (default `rollout.max_new_tokens`). Source: Song and Zheng, "Walk Before You Run!
    Concise LLM Reasoning via Reinforcement Learning", arXiv:2505.21178, section 3.2.
    """

    def __init__(self, context: RewardContext, *, max_length: Annotated[int, Field(ge=1)] | None = None):
        self.max_length = max_length or context.max_new_tokens

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        if not all(_is_correct(s, group, task) for s in group.samples):
            return [RewardOutput(0.0, "not all correct: no length reward") for _ in group.samples]
        return [RewardOutput(max(0.0, 1.0 - len(s.response_ids) / self.max_length), "all correct: length reward")
                for s in group.samples]


@REWARDS.register("otc")
class ToolEfficiencyReward:
    r"""OTC's tool-integrated reward (OTC-GRPO). With m the sample's tool calls and n the fewest tool calls among
    the group's correct samples (the estimate of the optimal number):

        f(m, n) = 0 if m = n = 0;  m if n = 0;  2nm / (m + n) otherwise
        r_tool  = 1 if f(m, n) = n = 0;  cos(m * pi / (2m + c)) if n = 0;  sin(f(m, n) * pi / (2n)) otherwise
        R       = alpha * r_tool * r_outcome

    so a correct answer earns most with the optimal number of calls, and wrong answers earn nothing. Tool
    calls are read from `sample.meta["tool_calls"]` (set by the agent rollout; 0 when absent). Source: Wang et
    al., "OTC: Optimal Tool Calls via Reinforcement Learning" (later "Acting Less is Reasoning More! Teaching
    Model to Act Efficiently"), arXiv:2504.14870, section 3.2.
    """

    def __init__(self, *, alpha: Annotated[float, Field(gt=0)] = 1.0, c: Annotated[float, Field(gt=0)] = 1.0):
        self.alpha, self.c = alpha, c

    def tool_reward(self, m: int, n: int | None) -> float:
        if n is None:  # no correct sample in the group: fall back to the PPO form
            n = 0
        if n == 0:
            return 1.0 if m == 0 else math.cos(m * math.pi / (2 * m + self.c))
        f = 2 * n * m / (m + n)
        return math.sin(f * math.pi / (2 * n))

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        calls = [int(s.meta.get("tool_calls", 0)) for s in group.samples]
        correct = [_is_correct(s, group, task) for s in group.samples]
        good = [m for m, c in zip(calls, correct) if c]
        n = min(good) if good else None
        return [RewardOutput(self.alpha * self.tool_reward(m, n) * float(c), f"{m} tool calls (optimum {n})")
                for m, c in zip(calls, correct)]


def _is_correct(sample: Any, group: Group, task: Any) -> bool:
    """The verifier's verdict: reuse it if a correctness term already ran, else verify here."""
    if sample.correct is not None:
        return bool(sample.correct)
    try:
        return bool(task.verify(sample.text, group.record).correct)
    except Exception:
        return False
