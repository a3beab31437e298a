"""Write a Python program or function; the reward is how many tests it passes, judged outside the sandbox.

Problems come from a JSONL/Parquet file (a prompt column and a tests column holding a list of tests: assert
strings, `{"call": "f", "args": [...], "expected": ...}` function-call tests, `{"input": ..., "output": ...}`
stdin/stdout tests, or an APPS/LiveCodeBench `{"inputs": [...], "outputs": [...], "fn_name"?}` object),
or, when no `path` is given, from a small built-in generator of function-writing problems ("Write a Python
function f(x) that returns 3*x + 2.") made deterministically from `seed`, so examples and tests need no data
files. `record.answer` holds the list of tests; see `rlvr.rewards.judge` for how
each is run and why a program cannot game it.
"""

from __future__ import annotations

import json
import logging
import random
import string
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from rlvr.rewards.code import RewardMode, extract_code, run_unit_tests, split_tests
from rlvr.rewards.judge import test_kind
from rlvr.tasks.base import TASKS, LazySplit, Task, TaskError, VerifyResult, distinct_records, holdout_split
from rlvr.tasks.jsonl import read_rows
from rlvr.types import TaskRecord

log = logging.getLogger(__name__)

_INSTRUCTION = "Answer with the complete function in a ```python code block."


# -- the built-in generator ---------------------------------------------------------------------------------
# Each family returns (question, tests, reference solution); `difficulty` is a rough 1-3 scale.


def _signed(n: int) -> str:
    return f"+ {n}" if n >= 0 else f"- {-n}"


def _linear(rng: random.Random) -> tuple[str, list[str], str]:
    a, b = rng.randint(2, 20), rng.randint(-20, 20)
    xs = rng.sample(range(-10, 11), rng.randint(3, 5))
    question = f"Write a Python function f(x) that returns {a}*x {_signed(b)}."
    return question, [f"assert f({x}) == {a * x + b}" for x in xs], f"def f(x):\n    return {a} * x {_signed(b)}\n"


def _quadratic(rng: random.Random) -> tuple[str, list[str], str]:
    a, b, c = rng.randint(1, 9), rng.randint(-9, 9), rng.randint(-9, 9)
    xs = rng.sample(range(-6, 7), rng.randint(3, 5))
    question = f"Write a Python function f(x) that returns {a}*x*x {_signed(b)}*x {_signed(c)}."
    tests = [f"assert f({x}) == {a * x * x + b * x + c}" for x in xs]
    return question, tests, f"def f(x):\n    return {a} * x * x {_signed(b)} * x {_signed(c)}\n"


def _sum_divisible(rng: random.Random) -> tuple[str, list[str], str]:
    k, t = rng.randint(2, 9), rng.randint(-5, 30)
    question = (f"Write a Python function f(xs) that returns the sum of the numbers in the list xs that are "
                f"divisible by {k} and greater than {t}.")
    tests = []
    for _ in range(rng.randint(3, 5)):
        xs = [rng.randint(-20, 60) for _ in range(rng.randint(0, 6))]
        xs += [k * rng.randint(t // k + 1, t // k + 6) for _ in range(rng.randint(1, 2))]  # some that count
        rng.shuffle(xs)
        tests.append(f"assert f({xs}) == {sum(x for x in xs if x % k == 0 and x > t)}")
    return question, tests, f"def f(xs):\n    return sum(x for x in xs if x % {k} == 0 and x > {t})\n"


def _count_char(rng: random.Random) -> tuple[str, list[str], str]:
    alphabet = rng.sample(string.ascii_lowercase, 4)
    c = alphabet[0]
    bonus = rng.randint(0, 9)
    question = (f"Write a Python function f(s) that returns the number of times the character '{c}' occurs "
                f"in the string s, plus {bonus}.")
    tests = []
    for _ in range(rng.randint(3, 5)):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
        tests.append(f"assert f({s!r}) == {s.count(c) + bonus}")
    return question, tests, f"def f(s):\n    return s.count({c!r}) + {bonus}\n"


def _join_repeat(rng: random.Random) -> tuple[str, list[str], str]:
    k, sep = rng.randint(2, 5), rng.choice(["-", "+", ",", ":", "|", "."])
    question = (f"Write a Python function f(s) that returns the string s repeated {k} times, with '{sep}' "
                f"between consecutive copies.")
    tests = []
    for _ in range(rng.randint(3, 5)):
        s = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 4)))
        tests.append(f"assert f({s!r}) == {sep.join([s] * k)!r}")
    return question, tests, f"def f(s):\n    return {sep!r}.join([s] * {k})\n"


def _piecewise(rng: random.Random) -> tuple[str, list[str], str]:
    k, m = rng.randint(2, 5), rng.randint(2, 7)
    xs = rng.sample(range(0, 40), rng.randint(3, 5))
    question = (f"Write a Python function f(x) that, for a non-negative integer x, returns x // {k} if x is "
                f"even and {m}*x + 1 if x is odd.")
    tests = [f"assert f({x}) == {x // k if x % 2 == 0 else m * x + 1}" for x in xs]
    return question, tests, f"def f(x):\n    return x // {k} if x % 2 == 0 else {m} * x + 1\n"


def _digit_sum(rng: random.Random) -> tuple[str, list[str], str]:
    k = rng.randint(1, 9)
    ns = rng.sample(range(0, 100_000), rng.randint(3, 5))
    question = (f"Write a Python function f(n) that returns {k} times the sum of the decimal digits of the "
                f"non-negative integer n.")
    tests = [f"assert f({n}) == {k * sum(int(d) for d in str(n))}" for n in ns]
    return question, tests, f"def f(n):\n    return {k} * sum(int(d) for d in str(n))\n"


FAMILIES: dict[str, tuple[Callable[[random.Random], tuple[str, list[str], str]], int]] = {
    "linear": (_linear, 1),
    "join_repeat": (_join_repeat, 1),
    "count_char": (_count_char, 1),
    "quadratic": (_quadratic, 2),
    "piecewise": (_piecewise, 2),
    "digit_sum": (_digit_sum, 2),
    "sum_divisible": (_sum_divisible, 3),
}


def synthetic_problem(seed: int, key: str) -> TaskRecord:
    """One generated problem, a pure function of (seed, key)."""
    rng = random.Random(f"code-{seed}-{key}")
    family = rng.choice(sorted(FAMILIES))
    make, difficulty = FAMILIES[family]
    question, tests, solution = make(rng)
    return TaskRecord(id=f"code-{key}", question=question, answer=tests, difficulty=difficulty,
                      source=f"code:{family}", meta={"solution": solution, "family": family})


def io_tests(spec: dict[str, Any]) -> list[dict[str, Any]] | None:
    """APPS / LiveCodeBench `{"inputs": [...], "outputs": [...], "fn_name"?}` as a list of tests: stdin/stdout
    tests, or function-call tests when `fn_name` is given (each input then holds the arguments, as a list or as
    one JSON value per line). None when the object has no such lists."""
    inputs, outputs = spec.get("inputs"), spec.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        return None
    name = spec.get("fn_name")
    if not name:
        return [{"input": i if isinstance(i, str) else "\n".join(map(str, i)),
                 "output": o if isinstance(o, str) else "\n".join(map(str, o))} for i, o in zip(inputs, outputs)]
    tests = []
    for i, o in zip(inputs, outputs):
        args = i if isinstance(i, list) else [json.loads(line) for line in str(i).split("\n") if line.strip()]
        expected = o[0] if isinstance(o, list) and len(o) == 1 else o  # APPS wraps call results in a list
        if isinstance(expected, str):
            try:
                expected = json.loads(expected)
            except json.JSONDecodeError:
                pass
        tests.append({"call": name, "args": args, "expected": expected})
    return tests


# -- the task ------------------------------------------------------------------------------------------------


@TASKS.register("code")
class CodeTask(Task):
    """Python programming problems scored by tests, each run in its own sandbox process and judged here.

    With `path`: rows with a prompt column and a tests column (a list of tests, a JSON-encoded list, one
    string of asserts, or an APPS-style inputs/outputs object); `eval_path` or a seeded `eval_fraction` gives
    the held-out split, and training rows whose prompt is held out are dropped. Without `path`:
    `train_size`/`eval_size` generated problems. `reward_mode`: `all` (1 only when every test passes; stops at
    the first failure) or `fraction` (share of tests passed). `timeout` is per test.
    """

    name = "code"
    default_prompt_template = "{question}\n" + _INSTRUCTION + "\n"
    default_chat_template = "{question}\n" + _INSTRUCTION

    def __init__(
        self,
        *,
        path: str | None = None,
        eval_path: str | None = None,
        eval_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1,
        prompt_column: str = "prompt",
        tests_column: str = "tests",
        setup_column: str | None = None,
        on_bad_row: Literal["skip", "error"] = "skip",
        train_size: Annotated[int, Field(ge=1)] = 10_000,
        eval_size: Annotated[int, Field(ge=1)] = 100,
        reward_mode: RewardMode = "all",
        timeout: Annotated[float, Field(gt=0, le=600)] = 5.0,
        memory_mb: Annotated[int, Field(ge=64)] = 512,
        seed: Annotated[int, Field(ge=0)] = 0,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
    ):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        self.reward_mode = reward_mode
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.seed = seed
        self.columns = {"prompt": prompt_column, "tests": tests_column, "setup": setup_column}
        self.on_bad_row = on_bad_row
        self.bad_rows = 0
        if path is None:
            if eval_path is not None:
                raise TaskError("task.eval_path: given without task.path; set task.path to the training file, "
                                "or drop eval_path to use the built-in generated problems")
            self._heldout = distinct_records(lambda i: synthetic_problem(seed, f"heldout-{i}"), eval_size)
            exclude = {r.question for r in self._heldout}
            self._train = LazySplit(train_size, lambda i, attempt: synthetic_problem(seed, f"train-{i}-{attempt}"),
                                    exclude)
            return
        heldout = self._load(Path(eval_path), "eval_path") if eval_path else None
        self._train, self._heldout = holdout_split(self._load(Path(path), "path"), heldout,
                                                   eval_fraction=eval_fraction, seed=seed, source=str(path))
        if self.bad_rows:
            log.warning("task: skipped %d malformed rows", self.bad_rows)

    def _load(self, path: Path, key: str) -> list[TaskRecord]:
        rows = read_rows(path)
        good = [r for _, r in rows if isinstance(r, dict)]
        if not good:
            raise TaskError(f"task.{key}: '{path}' has no rows")
        present = set().union(*(r.keys() for r in good[:100]))
        for role in ("prompt", "tests", "setup"):
            col = self.columns[role]
            if col is not None and col not in present:
                raise TaskError(
                    f"task.{role}_column: column '{col}' not found in '{path}'; columns are: "
                    f"{', '.join(sorted(present))}. Set task.{role}_column to the right one."
                )
        records = []
        for line_no, row in rows:
            tests, problem = self._row_tests(row)
            if problem:
                if self.on_bad_row == "error":
                    raise TaskError(f"task.{key}: row {line_no} of '{path}' is malformed: {problem}. "
                                    "Fix it, or set task.on_bad_row=skip")
                self.bad_rows += 1
                continue
            assert isinstance(row, dict)
            records.append(TaskRecord(id=f"{path.stem}-{line_no}", question=str(row[self.columns["prompt"]]),
                                      answer=tests, source=path.stem, meta={"row": line_no}))
        return records

    def _row_tests(self, row: Any) -> tuple[list[str], str | None]:
        """The row's tests (setup code prepended to each), or a description of what is wrong with it."""
        if not isinstance(row, dict):
            return [], getattr(row, "reason", "not a JSON object")  # a BadRow says why it could not be read
        prompt = row.get(self.columns["prompt"])
        if not isinstance(prompt, str) or not prompt.strip():
            return [], f"empty or missing '{self.columns['prompt']}'"
        tests = row.get(self.columns["tests"])
        if isinstance(tests, str):
            try:
                decoded = json.loads(tests)
                tests = decoded if isinstance(decoded, (list, dict)) else tests
            except json.JSONDecodeError:
                pass
        if isinstance(tests, dict):
            tests = io_tests(tests)
            if tests is None:
                return [], (f"'{self.columns['tests']}' is an object without equally long 'inputs' and "
                            "'outputs' lists")
        if isinstance(tests, str):
            tests = split_tests(tests)
        if not isinstance(tests, list):
            return [], f"'{self.columns['tests']}' must be a list of tests; got {type(tests).__name__}"
        tests = [t for t in tests if isinstance(t, dict) or (isinstance(t, str) and t.strip())]
        if not tests:
            return [], f"empty '{self.columns['tests']}'"
        for t in tests:
            try:
                test_kind(t)
            except ValueError as err:
                return [], str(err)
        setup_col = self.columns["setup"]
        setup = row.get(setup_col) if setup_col else None
        if isinstance(setup, list):
            setup = "\n".join(str(s) for s in setup)
        if setup and str(setup).strip():
            tests = [f"{setup}\n{t}" if isinstance(t, str) else t for t in tests]
        return tests, None

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        result = run_unit_tests(response, record.answer, timeout=self.timeout, memory_mb=self.memory_mb,
                                mode=self.reward_mode)
        return VerifyResult(
            reward=result.reward,
            correct=result.total > 0 and result.passed == result.total and result.reward == 1.0,
            reason=result.reason,
            extracted=extract_code(response) or None,
            # "blocked" / "anomaly" / None: the trainer logs the share of flagged samples (reward hacking telemetry)
            meta={"passed": result.passed, "total": result.total, "verifier_flag": result.flag},
        )

    # Label-free rewards vote over extracted answers; for code that is the code itself.
    def extract_answer(self, response: str) -> str | None:
        return extract_code(response) or None

    def answers_match(self, a: str, b: str) -> bool:
        return a.split() == b.split()
