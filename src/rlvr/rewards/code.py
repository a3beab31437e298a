"""Unit-test rewards for model-written Python: extract the code, judge it test by test.

Each test runs in its own fresh sandboxed process and is judged in this process from plain data
(`rlvr.rewards.judge`): the program never sees a test, an expected value or another test's input, and cannot
forge a report, because there is none to forge. A program that fails to load, crashes, times out, is killed,
is blocked by the sandbox or behaves anomalously (fake comparison objects, messages it should not send,
processes left behind) gets reward 0 with the reason; `CodeResult.flag` says "blocked" or "anomaly" for the
last two, which the trainer logs as reward-hacking telemetry.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Literal

from rlvr.rewards.judge import TestOutcome, describe_test, run_test, test_kind
from rlvr.rewards.sandbox import SandboxResult

RewardMode = Literal["all", "fraction"]

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_OPEN_PY_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n", re.IGNORECASE)
_PY_LANGS = ("python", "python3", "py")


@dataclass
class CodeResult:
    reward: float
    passed: int
    total: int
    reason: str
    sandbox: SandboxResult | None = field(default=None, repr=False)  # the last test's run
    flag: str | None = None  # "blocked" or "anomaly": the program tried something a solution never needs
    tests: list[TestOutcome] = field(default_factory=list, repr=False)


def extract_code(text: str) -> str:
    """The Python code in a model response: the last ```python block, else the last fenced block of any
    language, else an unclosed ```python block running to the end (a response cut at max length), else
    the whole text."""
    blocks = _FENCE.findall(text)
    python = [body for lang, body in blocks if lang.lower() in _PY_LANGS]
    if python:
        return _clean(python[-1])
    if blocks:
        return _clean(blocks[-1][1])
    opened = list(_OPEN_PY_FENCE.finditer(text))
    if opened:
        return _clean(text[opened[-1].end():])
    return _clean(text)


def _clean(code: str) -> str:
    return textwrap.dedent(code).strip("\n").rstrip() + "\n" if code.strip() else ""


def split_tests(tests: list[Any] | str) -> list[Any]:
    """Tests as a list. A string whose top-level statements are all asserts is split into one test per
    assert; any other string is one test. A list keeps its dict tests (function-call or stdin/stdout, see
    `rlvr.rewards.judge`) and its non-blank code strings."""
    if isinstance(tests, str):
        if not tests.strip():
            return []
        try:
            body = ast.parse(tests).body
        except SyntaxError:
            return [tests]
        if body and all(isinstance(node, ast.Assert) for node in body):
            return [ast.get_source_segment(tests, node) or ast.unparse(node) for node in body]
        return [tests]
    return [t if isinstance(t, dict) else str(t) for t in tests if isinstance(t, dict) or str(t).strip()]


def run_unit_tests(
    program: str,
    tests: list[Any] | str,
    *,
    timeout: float = 5.0,
    memory_mb: int = 512,
    mode: RewardMode = "all",
    max_output_bytes: int = 256_000,
) -> CodeResult:
    """Judge the code in `program` (a model response; see `extract_code`) on `tests`, each in its own sandbox
    run with `timeout` seconds (per test) and `memory_mb`.

    Reward: `all` gives 1.0 when every test passes, else 0.0, and stops at the first failing test; `fraction`
    gives passed/total. A program that fails to load, is killed, is blocked or behaves anomalously gets 0.
    """
    if mode not in ("all", "fraction"):
        raise ValueError(f"run_unit_tests: mode must be 'all' or 'fraction'; got {mode!r}")
    cases = split_tests(tests)
    total = len(cases)
    if not total:
        return CodeResult(0.0, 0, 0, "no tests to run (the record has an empty tests list)")
    code = extract_code(program)
    if not code.strip():
        return CodeResult(0.0, 0, total, "no code in the response")
    outcomes: list[TestOutcome] = []
    passed = 0
    for case in cases:
        outcome = run_test(code, case, timeout=timeout, memory_mb=memory_mb, max_output_bytes=max_output_bytes)
        outcomes.append(outcome)
        if outcome.passed:
            passed += 1
            continue
        if outcome.flag or outcome.fatal or outcome.killed or mode == "all":
            break
    last = outcomes[-1].sandbox

    def result(reward: float, reason: str, flag: str | None = None) -> CodeResult:
        return CodeResult(reward, passed, total, reason, last, flag, outcomes)

    if passed == total:
        return result(1.0, f"passed {total}/{total} tests")
    failed_at = next(i for i, o in enumerate(outcomes) if not o.passed)
    bad = outcomes[failed_at]
    before = f"{passed}/{total} tests passed before"
    if bad.flag:
        return result(0.0, f"{bad.reason} (test {failed_at + 1}; {before})", bad.flag)
    if bad.fatal:
        return result(0.0, bad.reason)
    if bad.killed:
        return result(0.0, f"{bad.reason} ({before})")
    reason = f"passed {passed}/{total} tests; test {failed_at + 1} `{_label(cases[failed_at])}` failed: {bad.reason}"
    return result(passed / total if mode == "fraction" else 0.0, reason)


def _label(case: Any) -> str:
    try:
        test_kind(case)
        return describe_test(case)
    except ValueError:
        return "malformed test"
