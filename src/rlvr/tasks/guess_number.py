"""Guess the number: the task behind the `guess_number` environment (a multi-turn game for agent rollouts).

A record's answer is the secret number; the environment's first observation explains the game, and the
prompt template wraps it. The verifier reads the model's *last* turn: it is correct when that turn's
`<guess>N</guess>` is the secret number, i.e. when the game was won within the turn limit.
"""

from __future__ import annotations

import random
import re
from typing import Annotated

from pydantic import Field

from rlvr.tasks.base import TASKS, Task, TaskError, VerifyResult
from rlvr.types import TaskRecord

_GUESS = re.compile(r"<guess>\s*(-?\d+)\s*</guess>")


@TASKS.register("guess_number")
class GuessNumberTask(Task):
    """Secret numbers drawn uniformly from [low, high] (set the environment's range to match)."""

    name = "guess_number"

    def __init__(self, *, low: int = 1, high: int = 100, train_size: Annotated[int, Field(ge=1)] = 10_000,
                 eval_size: Annotated[int, Field(ge=1)] = 100, seed: Annotated[int, Field(ge=0)] = 0,
                 prompt_template: str | None = None, chat_prompt_template: str | None = None,
                 system_prompt: str | None = None):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        if low >= high:
            raise TaskError(f"task.low must be < task.high; got {low}, {high}")
        question = f"Guess the secret number from {low} to {high}."

        def make(split: str, size: int) -> list[TaskRecord]:
            rng = random.Random(f"guess-{seed}-{split}")
            return [TaskRecord(id=f"guess-{split}-{i}", question=question, answer=str(rng.randint(low, high)),
                               source="guess_number") for i in range(size)]

        self._train, self._heldout = make("train", train_size), make("heldout", eval_size)

    def extract_answer(self, response: str) -> str | None:
        found = _GUESS.findall(response)
        return found[-1] if found else None

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        guess = self.extract_answer(response)
        if guess is None:
            return VerifyResult(0.0, False, "no <guess> in the last turn")
        if int(guess) == int(record.answer):
            return VerifyResult(1.0, True, "found the number", guess)
        return VerifyResult(0.0, False, f"last guess {guess}, the number was {record.answer}", guess)
