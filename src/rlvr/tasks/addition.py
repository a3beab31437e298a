"""Multi-digit addition with a column-by-column scratchpad: the built-in model's task.

A problem is `a+b` with a and b of 1 to `digits[1]` digits. The worked solution walks the columns from the
right, writing each column sum and the running result, then the answer:

    4821+397=1+7=8;8|2+9=11;18|8+3+1=12;218|4+0+1=5;5218|A:5218

The `+1` is the carry. Difficulty is the number of digits of the longer operand. Every step is local
(single-digit sums and copying), so a small model can learn the procedure; `worked_solution` can also play
a careless teacher that drops carries or slips a digit, which is how the built-in model is made imperfect.
"""

from __future__ import annotations

import random
import re
from typing import Annotated

from pydantic import Field

from rlvr.rewards.verifiers import extract_answer, parse_number
from rlvr.tasks.base import TASKS, LazySplit, Task, TaskError, VerifyResult, distinct_records
from rlvr.types import TaskRecord


def worked_solution(
    a: int,
    b: int,
    *,
    rng: random.Random | None = None,
    carry_slip: float = 0.0,
    digit_slip: float = 0.0,
) -> tuple[str, bool]:
    """The scratchpad solution of a+b and whether its final answer is right.

    With `rng`, each incoming carry is dropped with probability `carry_slip`, and each column sum is off by
    one with probability `digit_slip`; later columns then follow the slipped value consistently, like a
    careless person would.
    """
    xs, ys = str(a)[::-1], str(b)[::-1]
    columns = max(len(xs), len(ys))
    carry, running, steps = 0, "", []
    for i in range(columns):
        x = int(xs[i]) if i < len(xs) else 0
        y = int(ys[i]) if i < len(ys) else 0
        c = carry
        if c and rng is not None and rng.random() < carry_slip:
            c = 0
        s = x + y + c
        if rng is not None and rng.random() < digit_slip:
            s = min(19, max(0, s + rng.choice((-1, 1))))
        last = i == columns - 1
        running = (str(s) if last else str(s % 10)) + running
        carry = int(s >= 10)
        steps.append(f"{x}+{y}{'+1' if c else ''}={s};{running}")
    text = "|".join(steps) + f"|A:{running}"
    return text, int(running) == a + b


_STEP = re.compile(r"(\d)\+(\d)(\+1)?=(\d+);(\d+)")


def scratchpad_steps(text: str) -> list[tuple[int, int]]:
    """Character spans of the scratchpad's column steps: the `|`-separated pieces before the answer line
    (`A:` or `Answer:`), delimiters excluded; empty pieces are skipped."""
    spans, start = [], 0
    for piece in text.split("|"):
        end = start + len(piece)
        stripped = piece.strip()
        if stripped.startswith("A:") or stripped.lower().startswith("answer"):
            break
        if stripped:
            spans.append((start, end))
        start = end + 1
    return spans


def step_validity(text: str) -> tuple[list[float], bool]:
    """Per-step validity of an addition scratchpad, and whether the whole chain is valid.

    A step is valid when it is well formed (`x+y[+1]=s;running`), its sum is right (x + y + carry = s), its
    carry matches the previous column (carry iff the previous sum was >= 10), and its running result is the
    previous one with s's last digit (the whole s in the last column) prepended. The chain is valid when it has
    at least one step, every step is valid, and the answer line
    repeats the last running result. Nothing here looks at the problem: this is internal logic only.
    """
    spans = scratchpad_steps(text)
    scores, prev_sum, prev_running = [], 0, ""
    for k, (a, b) in enumerate(spans):
        m = _STEP.fullmatch(text[a:b].strip())
        ok = False
        if m:
            x, y, c, s, running = int(m[1]), int(m[2]), int(bool(m[3])), int(m[4]), m[5]
            last = k == len(spans) - 1
            ok = (x + y + c == s and c == int(prev_sum >= 10)
                  and running == (str(s) if last else str(s % 10)) + prev_running)
            prev_sum, prev_running = s, running
        scores.append(1.0 if ok else 0.0)
    found = extract_answer(text, "auto")
    chain = bool(spans) and all(scores) and found is not None and found.strip() == prev_running
    return scores, chain


@TASKS.register("addition")
class AdditionTask(Task):
    """Add two integers; the answer is checked exactly. Train and held-out problems never coincide."""

    name = "addition"
    default_prompt_template = "{question}="
    default_chat_template = (
        "Compute {question}. Work column by column from the right, then give the final answer on its own "
        "line as 'Answer: <number>'."
    )

    def __init__(
        self,
        *,
        digits: Annotated[tuple[int, int], Field(description="min and max digits of the longer operand")] = (2, 4),
        train_size: Annotated[int, Field(ge=1)] = 100_000,
        eval_size: Annotated[int, Field(ge=1)] = 200,
        seed: Annotated[int, Field(ge=0)] = 0,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
        answer_after: Annotated[str | None, Field(description=(
            "grade only the text after the last occurrence of this marker (spaces around it ignored), e.g. "
            "'<back>' for a model trained on search traversals (rlvr eval --sft-mode traversal): its final "
            "attempt is graded, an answer in an abandoned one never counts"))] = None,
    ):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        if answer_after is not None and not answer_after.strip():
            raise TaskError(f"task.answer_after: the marker must contain a non-space character; got "
                            f"{answer_after!r} (leave it unset to grade the whole response)")
        self.answer_after = answer_after
        lo, hi = digits
        if not 1 <= lo <= hi <= 18:
            raise TaskError(f"task.digits: expected 1 <= min <= max <= 18; got {list(digits)}")
        self.digits = (lo, hi)
        self.seed = seed
        space = sum(9 * 10 ** (d - 1) * 10**d for d in range(lo, hi + 1))
        if eval_size > space // 4:
            raise TaskError(f"task.eval_size: {eval_size} is too large for {lo}-{hi} digit problems "
                            f"(at most {space // 4})")
        self._heldout = distinct_records(lambda i: self._problem(f"heldout-{i}", i), eval_size)
        exclude = {r.question for r in self._heldout}
        self._train = LazySplit(train_size, lambda i, attempt: self._problem(f"train-{i}-{attempt}", i), exclude)

    def _problem(self, key: str, index: int) -> TaskRecord:
        rng = random.Random(f"addition-{self.seed}-{key}")
        d = rng.randint(*self.digits)
        a = rng.randint(10 ** (d - 1) if d > 1 else 0, 10**d - 1)
        db = rng.randint(1, d)
        b = rng.randint(10 ** (db - 1) if db > 1 else 0, 10**db - 1)
        if rng.random() < 0.5:
            a, b = b, a
        return TaskRecord(id=f"addition-{key}", question=f"{a}+{b}", answer=str(a + b), difficulty=d,
                          source="addition", meta={"a": a, "b": b})

    def final_attempt(self, response: str) -> str:
        """The part of a response that is graded: all of it, or with `answer_after` the text after the last
        marker (a traversal's final attempt)."""
        if self.answer_after is None:
            return response
        from rlvr.search.traversal import after_last_marker

        return after_last_marker(response, self.answer_after)

    def extract_answer(self, response: str) -> str | None:
        return extract_answer(self.final_attempt(response), "auto")

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        found = extract_answer(self.final_attempt(response), "auto")
        if found is None:
            return VerifyResult(0.0, False, "no answer found")
        value = parse_number(found)
        if value is None:
            return VerifyResult(0.0, False, f"answer {found!r} is not a number", found)
        if value == int(record.answer):
            return VerifyResult(1.0, True, "correct", found)
        return VerifyResult(0.0, False, f"wrong answer: got {found}, expected {record.answer}", found)

    def paraphrase(self, record: TaskRecord) -> TaskRecord:
        """b+a for a+b: the same sum, asked differently (Co-Reward's paraphrase pairs)."""
        a, b = record.meta["a"], record.meta["b"]
        return TaskRecord(id=f"{record.id}-swap", question=f"{b}+{a}", answer=record.answer,
                          difficulty=record.difficulty, source=record.source,
                          meta={"a": b, "b": a, "paraphrase_of": record.id})

    def worked_solution(self, record: TaskRecord, **slips) -> tuple[str, bool]:
        return worked_solution(record.meta["a"], record.meta["b"], **slips)

    # -- process rewards (rlvr.rewards.process): the scratchpad's steps can be checked ---------------------

    def reasoning_steps(self, response: str, record: TaskRecord) -> list[tuple[int, int]]:
        """Character spans of the response's column steps."""
        return scratchpad_steps(response)

    def key_steps(self, record: TaskRecord) -> list[str]:
        """The intermediate results a correct solution must contain: each column's sum, e.g. `8+3+1=12`."""
        text, _ = worked_solution(record.meta["a"], record.meta["b"])
        return [piece.split(";")[0] for piece in text.split("|")[:-1]]

    def step_validity(self, response: str, record: TaskRecord) -> tuple[list[float], bool]:
        """Per-step and whole-chain validity of the scratchpad (see `step_validity`)."""
        return step_validity(response)
