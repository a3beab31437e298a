"""Environments for multi-turn rollouts: `reset(record) -> first observation`, `step(action) -> StepResult`.

An environment is a registered class (`ENVIRONMENTS`); its keyword-only constructor parameters are its config
knobs (`agent.environment: {name: guess_number, high: 50}`), and every environment is built with the run's
`toolset` (possibly empty) as a runtime argument. One instance serves one episode.

The first observation takes the place of the task's `{question}`: the prompt is the task's template around it.
Each `step` gets the text of one model turn and returns the next observation, a reward for that turn, whether
the episode is over, and an `info` dict. The agent loop reads these `info` keys when present:

    tool_outputs  list[str]   one observation per tool call (rendered as separate tool messages)
    calls         list[dict]  per call: name, ok, error, latency_s, timed_out
    episode       dict        on the last step: kept with the sample as `meta["env_episode"]` (JSON-able)

`stop` lists the strings that end a model turn besides EOS; `observation_role` is `tool` (tool outputs) or
`user` (a game's feedback).
"""

from __future__ import annotations

import abc
import re
from typing import Annotated, Any, NamedTuple

from pydantic import Field

from rlvr.registry import Registry
from rlvr.rollout.format import CALL_CLOSE, parse_tool_calls
from rlvr.rollout.tools.base import ToolResult, ToolSet
from rlvr.types import TaskRecord

ENVIRONMENTS: Registry = Registry("environment")


class StepResult(NamedTuple):
    observation: str
    reward: float
    done: bool
    info: dict[str, Any]


class Environment(abc.ABC):
    stop: list[str] = []
    observation_role: str = "user"

    def __init__(self, toolset: ToolSet | None = None):
        self.toolset = toolset or ToolSet([])

    def tool_schemas(self) -> list[dict[str, Any]]:
        """Schemas of the tools announced in the prompt."""
        return self.toolset.schemas()

    @abc.abstractmethod
    def reset(self, record: TaskRecord) -> str:
        """Start an episode for `record`; return the first observation."""

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one model turn (its decoded text)."""

    def close(self) -> None:
        """Release per-episode resources (nothing by default; tools are shared and closed by their owner)."""
        return None


@ENVIRONMENTS.register("tools")
class ToolEnvironment(Environment):
    """The model answers the task's question, calling tools as it likes. A turn with `<tool_call>` blocks gets
    their outputs back; a turn without one is the final answer and ends the episode (reward 0 here: the
    task's verifier scores the answer). At most `max_calls_per_turn` calls run per turn; the rest get errors."""

    stop = [CALL_CLOSE]
    observation_role = "tool"

    def __init__(self, toolset: ToolSet | None = None, *, max_calls_per_turn: Annotated[int, Field(ge=1)] = 4):
        super().__init__(toolset)
        self.max_calls_per_turn = max_calls_per_turn

    def reset(self, record: TaskRecord) -> str:
        return record.question

    def step(self, action: str) -> StepResult:
        calls = parse_tool_calls(action)
        if not calls:
            return StepResult("", 0.0, True, {"calls": [], "tool_outputs": []})
        results: list[ToolResult] = []
        for i, call in enumerate(calls):
            if i >= self.max_calls_per_turn:
                results.append(ToolResult(getattr(call, "name", None),
                                          f"Error: more than {self.max_calls_per_turn} tool calls in one turn",
                                          error="too many calls in one turn"))
            else:
                results.append(self.toolset.execute(call))
        outputs = [r.output for r in results]
        return StepResult("\n".join(outputs), 0.0, False,
                          {"calls": [r.summary() for r in results], "tool_outputs": outputs})


_GUESS = re.compile(r"<guess>\s*(-?\d+)\s*</guess>")


@ENVIRONMENTS.register("guess_number")
class GuessNumberEnvironment(Environment):
    """A game: find the secret number (the record's `answer`) between `low` and `high`. Each turn the model
    writes `<guess>N</guess>` and hears `Higher.` or `Lower.`; a right guess ends the game with reward
    `win_reward`, a turn without a guess costs `invalid_reward`. Binary search needs log2(range) turns."""

    stop = ["</guess>"]
    observation_role = "user"

    def __init__(self, toolset: ToolSet | None = None, *, low: int = 1, high: int = 100, win_reward: float = 1.0,
                 invalid_reward: float = -0.1):
        super().__init__(toolset)
        if low >= high:
            raise ValueError(f"agent.environment: low must be < high; got {low}, {high}")
        self.low, self.high, self.win_reward, self.invalid_reward = low, high, win_reward, invalid_reward
        self.target: int | None = None
        self.guesses: list[int] = []

    def tool_schemas(self) -> list[dict[str, Any]]:
        return []

    def reset(self, record: TaskRecord) -> str:
        self.target = int(record.answer)
        self.guesses = []
        return (f"I am thinking of a number from {self.low} to {self.high}. Guess it: reply <guess>N</guess>. "
                "I will say Higher or Lower.")

    def step(self, action: str) -> StepResult:
        if self.target is None:
            raise RuntimeError("step() before reset()")
        found = _GUESS.findall(action)
        if not found:
            return StepResult("Reply with <guess>N</guess>.", self.invalid_reward, False, {"invalid": True})
        guess = int(found[-1])
        self.guesses.append(guess)
        if guess == self.target:
            return StepResult("Correct!", self.win_reward, True, {"guesses": len(self.guesses)})
        return StepResult("Higher." if guess < self.target else "Lower.", 0.0, False, {"guesses": len(self.guesses)})
