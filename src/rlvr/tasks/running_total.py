"""Running total: start from a number, apply each operation in turn, and give the final number.

The lab's second task (docs/lab.md). A problem is a start and a few operations, e.g. `7 +5 *3 -4`; the answer
is the running total after the last one, here 32 (left to right, no precedence: ((7+5)*3)-4). The answer is one
number, and it is not in the prompt, so a majority vote over samples means something. The worked form a policy
writes is one step per operation, then the answer:

    7+5=12;12*3=36;36-4=32|A:32

and its length can vary for reasons other than the problem's size: a step may be checked and written again
(`12*3=35!12*3=36`, a retry that fixes a slip, or repeats it), and a response may go on after the answer
(`|A:32~7+5=12;12*3=36`). Only the number after the last `A:` (or `Answer:`) is graded; everything else is a
scratchpad. Difficulty is the count of operations.

Intermediate totals stay in 0..MAX_TOTAL (a `-` never goes below 0). The answer is parsed with a regular
expression, never `eval`: model output is untrusted. A missing marker, a marker with no integer after it, or an
integer of more than MAX_ANSWER_DIGITS digits scores 0 with the reason.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Annotated

from pydantic import Field

from rlvr.tasks.base import TASKS, LazySplit, Task, TaskError, VerifyResult, distinct_records
from rlvr.tasks.heldout import is_held_out
from rlvr.types import TaskRecord

MAX_TOTAL = 999
MAX_ANSWER_DIGITS = 6
OPERATIONS = "+-*"
_ANSWER = re.compile(r"(?:\bA|\bAnswer)\s*:", re.IGNORECASE)
_NUMBER = re.compile(r"\s*([+-]?)(\d+)")

HELD_OUT_FAMILY = "running_total"
# A twentieth of all problems is held out (tasks/heldout.py); with the default sizes there are millions of
# problems, so the pool is far larger than any held-out split.
HELD_OUT_SHARE = 0.05


def apply_op(total: int, op: str, operand: int) -> int | None:
    """`total op operand`, or None when it leaves 0..MAX_TOTAL."""
    if op == "+":
        value = total + operand
    elif op == "-":
        value = total - operand
    elif op == "*":
        value = total * operand
    else:
        raise ValueError(f"unknown operation {op!r}")
    return value if 0 <= value <= MAX_TOTAL else None


def parse_problem(question: str) -> tuple[int, list[tuple[str, int]]]:
    """`"7 +5 *3 -4"` -> (7, [("+", 5), ("*", 3), ("-", 4)])."""
    first, *rest = question.split()
    return int(first), [(w[0], int(w[1:])) for w in rest]


def solve(start: int, steps: Sequence[tuple[str, int]]) -> list[int]:
    """The running totals after each operation (the last is the answer)."""
    totals, total = [], start
    for op, operand in steps:
        value = apply_op(total, op, operand)
        if value is None:
            raise ValueError(f"{total}{op}{operand} leaves 0..{MAX_TOTAL}")
        totals.append(value)
        total = value
    return totals


def final_number(response: str) -> tuple[str | None, str]:
    """The integer right after the last `A:` / `Answer:` marker as a canonical string ("-3", "32"), with the
    reason when there is none."""
    matches = list(_ANSWER.finditer(response))
    if not matches:
        return None, "no answer found (expected 'A: <number>' or 'Answer: <number>')"
    m = _NUMBER.match(response, matches[-1].end())
    if m is None:
        return None, "no integer after the last answer marker"
    if len(m[2].lstrip("0")) > MAX_ANSWER_DIGITS:
        return None, f"the answer has more than {MAX_ANSWER_DIGITS} digits"
    value = int(m[2])
    return str(-value if m[1] == "-" else value), "ok"


def canonical_problem(record: TaskRecord) -> str:
    """What makes two problems the same: the question itself (order matters)."""
    return " ".join(record.question.split())


def running_total_held_out(record: TaskRecord) -> bool:
    """Whether a record is in the held-out pool, whichever variant of the task drew it."""
    return is_held_out(HELD_OUT_FAMILY, canonical_problem(record), HELD_OUT_SHARE)


@TASKS.register("running_total")
class RunningTotalTask(Task):
    """Apply each operation to a running total, left to right, and give the final number."""

    name = "running_total"
    default_prompt_template = "{question}:"
    default_chat_template = (
        "Running total: {question}. Start from the first number and apply each operation in turn, left to right "
        "(no precedence). Show each step, then give the final number on its own line as 'Answer: <number>'."
    )

    def __init__(
        self,
        *,
        sizes: Annotated[tuple[int, ...], Field(description="how many operations a problem has; one is drawn "
                                                "per problem")] = (2, 3, 4, 5),
        max_start: Annotated[int, Field(ge=1, le=MAX_TOTAL, description="the start is drawn from 1..max_start")] = 20,
        max_addend: Annotated[int, Field(ge=1, le=MAX_TOTAL, description="+ and - operands are 1..max_addend")] = 30,
        max_factor: Annotated[int, Field(ge=2, le=99, description="* operands are 2..max_factor")] = 9,
        train_size: Annotated[int, Field(ge=1)] = 100_000,
        eval_size: Annotated[int, Field(ge=1)] = 200,
        seed: Annotated[int, Field(ge=0)] = 0,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
    ):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        sizes = tuple(sizes)
        if not sizes or any(not 1 <= s <= 8 for s in sizes):
            raise TaskError(f"task.sizes: each size must be 1..8 operations; got {list(sizes)}")
        self.sizes, self.max_start, self.max_addend, self.max_factor = sizes, max_start, max_addend, max_factor
        self.seed = seed
        # Held out by construction (tasks/heldout.py): the held-out split comes from the family's pool and every
        # training split from outside it.
        self._heldout = distinct_records(
            lambda i: self._problem(f"heldout-{i}", pool=True), eval_size, key=canonical_problem,
            what=f"task.eval_size (the held-out pool is {HELD_OUT_SHARE:.0%} of the problems)")
        self._train = LazySplit(train_size, lambda i, attempt: self._problem(f"train-{i}-{attempt}"),
                                key=canonical_problem, held_out=running_total_held_out)

    def _problem(self, key: str, pool: bool = False) -> TaskRecord:
        """The problem drawn for `key`; with `pool`, the first draw that is in the held-out pool."""
        rng = random.Random(f"running_total-{self.seed}-{key}")
        size = rng.choice(self.sizes)
        while True:
            start = rng.randint(1, self.max_start)
            steps, total = [], start
            for _ in range(size):
                while True:
                    op = rng.choice(OPERATIONS)
                    operand = rng.randint(2, self.max_factor) if op == "*" else rng.randint(1, self.max_addend)
                    value = apply_op(total, op, operand)
                    if value is not None and value != total:
                        break
                steps.append((op, operand))
                total = value
            question = f"{start} " + " ".join(f"{op}{n}" for op, n in steps)
            if pool and not is_held_out(HELD_OUT_FAMILY, question, HELD_OUT_SHARE):
                continue
            return TaskRecord(id=f"running_total-{key}", question=question, answer=str(total), difficulty=size,
                              source="running_total", meta={"start": start, "steps": steps})

    def extract_answer(self, response: str) -> str | None:
        return final_number(response)[0]

    def vote_answer(self, answer: str | None, record: TaskRecord | None) -> str | None:
        """The answer as an integer's canonical text ("032" and "+32" vote with "32"); None if not an integer."""
        if answer is None:
            return None
        m = re.fullmatch(r"\s*([+-]?)(\d+)\s*", answer)
        if m is None or len(m[2].lstrip("0")) > MAX_ANSWER_DIGITS:
            return None
        value = int(m[2])
        return str(-value if m[1] == "-" else value)

    def answers_match(self, a: str, b: str) -> bool:
        va, vb = self.vote_answer(a, None), self.vote_answer(b, None)  # type: ignore[arg-type]
        return va is not None and va == vb

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        answer, reason = final_number(response)
        if answer is None:
            return VerifyResult(0.0, False, reason)
        ok = answer == record.answer
        return VerifyResult(1.0 if ok else 0.0, ok, "correct" if ok else
                            f"wrong value: the answer is {answer}, the running total is {record.answer}", answer)

    # -- process rewards: every step can be checked ------------------------------------------------------

    def reasoning_steps(self, response: str, record: TaskRecord) -> list[tuple[int, int]]:
        """Character spans of the `a op b = c` steps before the answer (a retry `!` starts a new step)."""
        head = response.split("|", 1)[0]
        spans, start = [], 0
        for piece in re.split(r"[;!]", head):
            if piece.strip():
                spans.append((start, start + len(piece)))
            start += len(piece) + 1
        return spans

    def step_validity(self, response: str, record: TaskRecord) -> tuple[list[float], bool]:
        """A step `a op b = c` is valid when its arithmetic is right; the chain is valid when every step is and
        the answer is right."""
        scores = []
        for a, b in self.reasoning_steps(response, record):
            m = re.fullmatch(r"\s*(\d+)([-+*])(\d+)=(\d+)\s*", response[a:b])
            scores.append(1.0 if m and apply_op(int(m[1]), m[2], int(m[3])) == int(m[4]) else 0.0)
        chain = bool(scores) and all(scores) and self.verify(response, record).correct
        return scores, chain

