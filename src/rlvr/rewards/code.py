"""Unit-test rewards for model-written Python: extract the code, run it with the tests in the sandbox.

All tests run in ONE sandbox process. A harness executes the program, then each test in its own
try/except, and writes one result line per test to stdout, prefixed with a random nonce the program does
not know; the parent counts only those lines. A program that crashes, times out, is killed or is blocked
gets reward 0 with the reason.
"""

from __future__ import annotations

import ast
import re
import secrets
import textwrap
from dataclasses import dataclass, field
from typing import Literal

from rlvr.rewards.sandbox import SandboxResult, run_python

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
    sandbox: SandboxResult | None = field(default=None, repr=False)


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


def split_tests(tests: list[str] | str) -> list[str]:
    """Tests as a list of snippets. A string whose top-level statements are all asserts is split into one
    test per assert; any other string is one test."""
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
    return [str(t) for t in tests if str(t).strip()]


_HARNESS = '''
def __rlvr_run_tests(program, tests, nonce):
    import os, sys
    write = os.write

    def emit(line):
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        try:
            write(1, ("\\n" + nonce + " " + line + "\\n").encode("utf-8", "replace"))
        except BaseException:
            pass

    def describe(err):
        try:
            text = type(err).__name__ + (": " + str(err) if str(err) else "")
        except BaseException:
            text = type(err).__name__
        return text.replace("\\n", " ")[:300]

    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(program, "<solution>", "exec"), namespace)
    except BaseException as err:
        emit("P " + describe(err))
        return
    for i, test in enumerate(tests):
        try:
            exec(compile(test, "<test %d>" % (i + 1), "exec"), namespace)
        except BaseException as err:
            emit("F %d %s" % (i, describe(err)))
        else:
            emit("T %d" % i)
    emit("D")
'''


def run_unit_tests(
    program: str,
    tests: list[str] | str,
    *,
    timeout: float = 5.0,
    memory_mb: int = 512,
    mode: RewardMode = "all",
    max_output_bytes: int = 256_000,
) -> CodeResult:
    """Run the code in `program` (a model response; see `extract_code`) against `tests` in one sandbox.

    Reward: `all` gives 1.0 when every test passes, else 0.0; `fraction` gives passed/total. A program
    that fails to load, crashes, times out or is blocked gets 0.
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
    nonce = secrets.token_hex(16)
    source = _HARNESS + f"\n__rlvr_run_tests({code!r}, {cases!r}, {nonce!r})\n"
    result = run_python(source, timeout=timeout, memory_mb=memory_mb, max_output_bytes=max_output_bytes)

    passed: set[int] = set()
    failures: dict[int, str] = {}
    load_error: str | None = None
    done = False
    prefix = nonce + " "
    for line in result.stdout.splitlines():
        if not line.startswith(prefix):
            continue
        kind, _, rest = line[len(prefix):].partition(" ")
        if kind == "D":
            done = True
        elif kind == "P":
            load_error = rest
        elif kind in ("T", "F"):
            index, _, message = rest.partition(" ")
            if index.isdigit() and int(index) < total:
                if kind == "T":
                    passed.add(int(index))
                else:
                    failures[int(index)] = message
    n_passed = len(passed)

    def fail(reason: str) -> CodeResult:
        return CodeResult(0.0, n_passed, total, reason, result)

    if result.killed_reason:
        why = f"timeout after {timeout:g}s" if result.timed_out else result.killed_reason
        return fail(f"{why} ({n_passed}/{total} tests passed before)")
    if load_error is not None:
        return fail(f"program failed to run: {load_error}")
    if not done:
        if result.exit_code:
            tail = result.stderr.strip().rsplit("\n", 1)[-1][:300]
            return fail(f"program crashed (exit code {result.exit_code}){': ' + tail if tail else ''} "
                        f"({n_passed}/{total} tests passed before)")
        return fail(f"program exited before the tests finished ({n_passed}/{total} tests passed before)")
    if result.exit_code:  # all tests ran, then the interpreter failed on the way out
        return fail(f"program crashed at exit (exit code {result.exit_code})")
    if n_passed == total:
        return CodeResult(1.0, n_passed, total, f"passed {total}/{total} tests", result)
    first = min(i for i in range(total) if i not in passed)
    snippet = " ".join(cases[first].split())
    snippet = snippet if len(snippet) <= 100 else snippet[:97] + "..."
    message = failures.get(first, "did not run")
    reason = f"passed {n_passed}/{total} tests; test {first + 1} `{snippet}` failed: {message}"
    reward = n_passed / total if mode == "fraction" else 0.0
    return CodeResult(reward, n_passed, total, reason, result)
