"""Countdown: reach a target from given numbers with + - * / and parentheses, each number used exactly once.

The lab task (docs/lab.md). A problem is a few small numbers and a target, e.g. `3 7 12 5 -> 31`; an answer
is an expression such as `((7*5)-12)+3`... that evaluates exactly (rational arithmetic) to the target. The
worked form a policy writes is a chain of steps and then the expression:

    7*5=35;35-12=23;23+3=26|A:((7*5)-12)+3

Only the expression after the last `A:` (or `Answer:`) is graded; the steps are a scratchpad. Many answers are
right, the verifier is exact, and the problems differ in kind: a target built as `(a op b) op (c op d)` may
have no left-to-right chain solution at all, and a model that has only learned chains never solves it, whatever
its k. Difficulty is the count of numbers.

The expression is parsed by a small recursive-descent parser over exact fractions, never by `eval`: model
output is untrusted. Anything but digits, `+ - * / ( )` and spaces, a unary sign, a number not in the problem,
a number used twice or not at all, division by zero, or an expression longer than `MAX_EXPRESSION_CHARS`
scores 0 with the reason.
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Annotated

from pydantic import Field

from rlvr.tasks.base import TASKS, LazySplit, Task, TaskError, VerifyResult, distinct_records
from rlvr.tasks.heldout import is_held_out
from rlvr.types import TaskRecord

MAX_EXPRESSION_CHARS = 200
MAX_DEPTH = 32  # parenthesis nesting; a 6-number expression needs at most 5
OPS = "+-*/"
_ANSWER = re.compile(r"(?:A|Answer)\s*:", re.IGNORECASE)


class ExpressionError(ValueError):
    """An answer is not a well-formed countdown expression. The message is the verifier's reason."""


def _tokens(text: str) -> list[str]:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit():
            j = i
            while j < len(text) and text[j].isdigit():
                j += 1
            if j - i > 6:
                raise ExpressionError(f"number {text[i:j]!r} is too long")
            out.append(text[i:j])
            i = j
        elif ch in OPS or ch in "()":
            out.append(ch)
            i += 1
        else:
            raise ExpressionError(f"unexpected character {ch!r}")
    return out


class _Parser:
    """expr := term (('+'|'-') term)* ; term := atom (('*'|'/') atom)* ; atom := NUMBER | '(' expr ')'."""

    def __init__(self, tokens: list[str]):
        self.tokens, self.pos, self.numbers = tokens, 0, []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ExpressionError("the expression ends too early")
        self.pos += 1
        return tok

    def expr(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            op, rhs = self.take(), self.term(depth)
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self, depth: int) -> Fraction:
        value = self.atom(depth)
        while self.peek() in ("*", "/"):
            op, rhs = self.take(), self.atom(depth)
            if op == "*":
                value = value * rhs
            elif rhs == 0:
                raise ExpressionError("division by zero")
            else:
                value = value / rhs
        return value

    def atom(self, depth: int) -> Fraction:
        tok = self.take()
        if tok == "(":
            if depth >= MAX_DEPTH:
                raise ExpressionError(f"parentheses nested deeper than {MAX_DEPTH}")
            value = self.expr(depth + 1)
            if self.peek() != ")":
                raise ExpressionError("unbalanced parentheses: a '(' is not closed")
            self.take()
            return value
        if tok.isdigit():
            self.numbers.append(int(tok))
            return Fraction(int(tok))
        raise ExpressionError(f"expected a number or '(' but found {tok!r}"
                              + (" (unary signs are not allowed)" if tok in "+-" else ""))


def evaluate_expression(text: str) -> tuple[Fraction, list[int]]:
    """The exact value of a countdown expression and the numbers it uses, in order. Raises ExpressionError."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    tokens = _tokens(text)
    if not tokens:
        raise ExpressionError("empty expression")
    parser = _Parser(tokens)
    value = parser.expr(0)
    if parser.peek() is not None:
        raise ExpressionError(f"unexpected {parser.peek()!r} after a complete expression")
    return value, parser.numbers


def final_expression(response: str) -> str | None:
    """The text after the last `A:` / `Answer:` marker, up to the end of its line, or None."""
    matches = list(_ANSWER.finditer(response))
    if not matches:
        return None
    tail = response[matches[-1].end():]
    return tail.split("\n", 1)[0].strip().rstrip(".")


def check_expression(expression: str, numbers: Sequence[int], target: int) -> tuple[bool, str]:
    """Whether `expression` uses each of `numbers` exactly once and equals `target`, with the reason."""
    try:
        value, used = evaluate_expression(expression)
    except ExpressionError as err:
        return False, f"invalid expression: {err}"
    if Counter(used) != Counter(numbers):
        extra = Counter(used) - Counter(numbers)
        missing = Counter(numbers) - Counter(used)
        parts = []
        if extra:
            parts.append("not available: " + ", ".join(str(n) for n in sorted(extra.elements())))
        if missing:
            parts.append("unused: " + ", ".join(str(n) for n in sorted(missing.elements())))
        return False, "numbers must each be used exactly once (" + "; ".join(parts) + ")"
    if value != target:
        shown = str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
        return False, f"wrong value: the expression makes {shown}, the target is {target}"
    return True, "correct"


def apply(a: int, op: str, b: int) -> int | None:
    """`a op b` when it stays a positive integer (exact division only), else None: the chains the worked
    solutions and the problem generator use."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b if a > b else None
    if op == "*":
        return a * b
    return a // b if b and a % b == 0 else None


def chain_solutions(numbers: Sequence[int], target: int) -> Iterator[tuple[tuple[int, ...], tuple[str, ...]]]:
    """Every left-to-right chain `((n1 op n2) op n3) ...` over positive integers that makes `target`, as
    (order of the numbers, ops). Repeated numbers give repeated orders only once."""
    for order in dict.fromkeys(itertools.permutations(numbers)):
        for ops in itertools.product(OPS, repeat=len(order) - 1):
            value: int | None = order[0]
            for op, n in zip(ops, order[1:]):
                value = apply(value, op, n)  # type: ignore[arg-type]
                if value is None:
                    break
            if value == target:
                yield order, ops


def chain_text(order: Sequence[int], ops: Sequence[str]) -> tuple[str, int | None]:
    """The worked form of a chain (steps, then the fully parenthesised expression) and its value (None when a
    step leaves the positive integers: the text then stops at that step, as a failed attempt)."""
    value: int | None = order[0]
    expr, steps = str(order[0]), []
    for op, n in zip(ops, order[1:]):
        new = apply(value, op, n)  # type: ignore[arg-type]
        if new is None:
            return ";".join(steps), None
        steps.append(f"{value}{op}{n}={new}")
        expr = f"({expr}{op}{n})" if len(steps) < len(ops) else f"{expr}{op}{n}"
        value = new
    return ";".join(steps) + f"|A:{expr}", value


HELD_OUT_FAMILY = "countdown"
# A twentieth of all countdown problems is held out: with the default sizes, numbers and targets, 1,839 of the
# 34,576 problems the generator can make (sorted numbers and target), nine times the held-out split's 200.
HELD_OUT_SHARE = 0.05


def canonical_form(numbers: Sequence[int], target: int) -> str:
    """What makes two countdown problems the same: the numbers as a multiset (sorted) and the target."""
    return " ".join(map(str, sorted(numbers))) + f" -> {target}"


def canonical_problem(record: TaskRecord) -> str:
    return canonical_form(record.meta["numbers"], record.meta["target"])


def countdown_held_out(record: TaskRecord) -> bool:
    """Whether a countdown record is in the held-out pool, whichever variant of the task drew it."""
    return is_held_out(HELD_OUT_FAMILY, canonical_problem(record), HELD_OUT_SHARE)


@TASKS.register("countdown")
class CountdownTask(Task):
    """Make the target from the given numbers (each exactly once) with + - * / and parentheses."""

    name = "countdown"
    default_prompt_template = "{question}:"
    default_chat_template = (
        "Countdown: {question}. Combine every number on the left exactly once with + - * / and parentheses to "
        "make the number on the right. Show your steps, then give the expression on its own line as "
        "'Answer: <expression>'."
    )

    def __init__(
        self,
        *,
        sizes: Annotated[tuple[int, ...], Field(description="how many numbers a problem has; one size is "
                                                "drawn per problem")] = (3, 4),
        max_number: Annotated[int, Field(ge=2, le=100, description="the numbers are drawn from 1..max_number")] = 10,
        max_target: Annotated[int, Field(ge=2, le=10_000)] = 100,
        pair_frac: Annotated[float, Field(ge=0.0, le=1.0, description=(
            "share of 4+-number targets built as (a op b) op (c op d) rather than a left-to-right chain"))] = 0.3,
        pair_only: Annotated[bool, Field(description=(
            "a pair-shaped problem is kept only when no left-to-right chain reaches its target, so a policy "
            "that writes only chains never solves it (false: any pair-shaped target)"))] = True,
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
        if not sizes or any(not 2 <= s <= 6 for s in sizes):
            raise TaskError(f"task.sizes: each size must be 2..6 numbers; got {list(sizes)}")
        self.sizes, self.max_number, self.max_target = sizes, max_number, max_target
        self.pair_frac, self.pair_only, self.seed = pair_frac, pair_only, seed
        # Held out by construction: the held-out split is drawn from the family's pool (tasks/heldout.py) and
        # every training split from outside it, so no variant of this task trains on any variant's held-out set.
        self._heldout = distinct_records(
            lambda i: self._problem(f"heldout-{i}", pool=True), eval_size, key=canonical_problem,
            what=f"task.eval_size (the held-out pool is {HELD_OUT_SHARE:.0%} of the problems of these sizes)")
        self._train = LazySplit(train_size, lambda i, attempt: self._problem(f"train-{i}-{attempt}"),
                                key=canonical_problem, held_out=countdown_held_out)

    def _problem(self, key: str, pool: bool = False) -> TaskRecord:
        """The problem drawn for `key`; with `pool`, the first draw that is in the held-out pool."""
        rng = random.Random(f"countdown-{self.seed}-{key}")
        size = shape = None
        while True:
            if size is None or not self.pair_only:  # pair_only keeps the problem's size and shape while redrawing
                size = rng.choice(self.sizes)
                numbers = [rng.randint(1, self.max_number) for _ in range(size)]
                shape = "pair" if size >= 4 and rng.random() < self.pair_frac else "chain"
            else:
                numbers = [rng.randint(1, self.max_number) for _ in range(size)]
            target = self._random_target(rng, numbers, shape)
            if target is None or not 1 <= target <= self.max_target or target in numbers:
                continue
            if pool and not is_held_out(HELD_OUT_FAMILY, canonical_form(numbers, target), HELD_OUT_SHARE):
                continue
            if shape == "pair" and self.pair_only and next(chain_solutions(numbers, target), None) is not None:
                continue
            break
        question = " ".join(map(str, numbers)) + f" -> {target}"
        return TaskRecord(id=f"countdown-{key}", question=question, answer=str(target), difficulty=size,
                          source="countdown", meta={"numbers": numbers, "target": target, "shape": shape})

    @staticmethod
    def _random_target(rng: random.Random, numbers: list[int], shape: str) -> int | None:
        order = rng.sample(numbers, len(numbers))
        ops = [rng.choice(OPS) for _ in range(len(order) - 1)]
        if shape == "chain":
            value: int | None = order[0]
            for op, n in zip(ops, order[1:]):
                value = apply(value, op, n) if value is not None else None
            return value
        left = apply(order[0], ops[0], order[1])
        right: int | None = order[2]
        for op, n in zip(ops[2:], order[3:]):
            right = apply(right, op, n) if right is not None else None
        if left is None or right is None:
            return None
        return apply(left, ops[1], right)

    def extract_answer(self, response: str) -> str | None:
        return final_expression(response)

    def answers_match(self, a: str, b: str) -> bool:
        """Two answers match when they are the same text up to spaces: the same expression, or (after
        `vote_answer`) the same value."""
        return a.replace(" ", "") == b.replace(" ", "")

    def vote_answer(self, answer: str | None, record: TaskRecord) -> str | None:
        """The exact value of a well-formed expression that uses each given number exactly once, e.g. "31" or
        "7/2"; None for anything else. So every right expression votes for the target (a right majority does
        not penalise the other right expressions), and a majority is right exactly when its value is the
        target."""
        if answer is None:
            return None
        try:
            value, used = evaluate_expression(answer)
        except (ExpressionError, ZeroDivisionError, RecursionError):
            return None
        if Counter(used) != Counter(record.meta["numbers"]):
            return None
        return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        expression = final_expression(response)
        if expression is None:
            return VerifyResult(0.0, False, "no answer found (expected 'A: <expression>' or 'Answer: ...')")
        ok, reason = check_expression(expression, record.meta["numbers"], record.meta["target"])
        return VerifyResult(1.0 if ok else 0.0, ok, reason, expression)

    # -- process rewards: the chain's steps can be checked ----------------------------------------------

    def reasoning_steps(self, response: str, record: TaskRecord) -> list[tuple[int, int]]:
        """Character spans of the `a op b = c` steps before the answer."""
        head = response.split("|", 1)[0] if "|" in response else response
        spans, start = [], 0
        for piece in head.split(";"):
            if piece.strip():
                spans.append((start, start + len(piece)))
            start += len(piece) + 1
        return spans

    def step_validity(self, response: str, record: TaskRecord) -> tuple[list[float], bool]:
        """A step `a op b = c` is valid when its arithmetic is right, `a` is a given number or the previous
        result, and `b` is a given number not used before; the chain is valid when every step is and the
        graded expression is right."""
        pool = Counter(record.meta["numbers"])
        scores, previous = [], None
        for a, b in self.reasoning_steps(response, record):
            m = re.fullmatch(r"\s*(\d+)([-+*/])(\d+)=(\d+)\s*", response[a:b])
            ok = False
            if m:
                x, op, y, z = int(m[1]), m[2], int(m[3]), int(m[4])
                left_ok = x == previous if previous is not None else pool[x] > 0
                if previous is None and left_ok:
                    pool[x] -= 1
                ok = left_ok and pool[y] > 0 and apply(x, op, y) == z
                if ok:
                    pool[y] -= 1
                previous = z
            scores.append(1.0 if ok else 0.0)
        chain = bool(scores) and all(scores) and self.verify(response, record).correct
        return scores, chain
