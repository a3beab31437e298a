"""The three test formats of the code judge, as plain data: which kind a test is, its parts, a one-line label,
and how a stdin/stdout test's output is compared (line by line, token by token, whitespace-tolerant)."""

from __future__ import annotations

import json
from typing import Any

REPR_LIMIT = 80


def short(value: Any, limit: int = REPR_LIMIT) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def test_kind(test: Any) -> str:
    """'assert', 'call' or 'stdio'; ValueError for anything else."""
    if isinstance(test, str):
        return "assert"
    if isinstance(test, dict):
        if any(k in test for k in ("call", "fn_name", "fn")):
            return "call"
        if "input" in test and "output" in test:
            return "stdio"
    raise ValueError(f"a test must be code (str), {{'call', 'args', 'expected'}} or {{'input', 'output'}}; "
                     f"got {short(test)}")


def describe_test(test: Any) -> str:
    """A short one-line label for a test, for reasons."""
    kind = test_kind(test)
    if kind == "assert":
        text = " ".join(test.split())
    elif kind == "call":
        name, args, kwargs, _ = call_parts(test)
        inner = ", ".join([short(a, 30) for a in args] + [f"{k}={short(v, 30)}" for k, v in kwargs.items()])
        text = f"{name}({inner})"
    else:
        text = "stdin " + short(test["input"], 60)
    return text if len(text) <= 100 else text[:97] + "..."


def call_parts(test: dict[str, Any]) -> tuple[str, list[Any], dict[str, Any], Any]:
    name = test.get("call") or test.get("fn_name") or test.get("fn")
    if not isinstance(name, str) or not name:
        raise ValueError(f"function-call test without a function name: {short(test)}")
    if "args" in test:
        args = test["args"]
        args = list(args) if isinstance(args, (list, tuple)) else [args]
    elif "input" in test:  # LiveCodeBench functional: one JSON value per line
        raw = test["input"]
        args = [json.loads(line) for line in raw.split("\n") if line.strip()] if isinstance(raw, str) else list(raw)
    else:
        args = []
    kwargs = dict(test.get("kwargs") or {})
    if "expected" in test:
        expected = test["expected"]
    elif "output" in test:
        out = test["output"]
        expected = json.loads(out) if isinstance(out, str) else out
    else:
        raise ValueError(f"function-call test without 'expected': {short(test)}")
    return name, args, kwargs, expected


def as_json_shape(value: Any) -> Any:
    """Tuples as lists, recursively (expected values that came from JSON have no tuples)."""
    t = type(value)
    if t is tuple or t is list:
        return [as_json_shape(v) for v in value]
    if t is dict:
        return {k: as_json_shape(v) for k, v in value.items()}
    return value


def output_lines(text: str) -> list[list[str]]:
    """Output as lines of whitespace-separated tokens, trailing blank lines dropped."""
    lines = [line.split() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def outputs_match(got: str, expected: str) -> tuple[bool, str]:
    a, b = output_lines(got), output_lines(expected)
    if a == b:
        return True, ""
    for i in range(max(len(a), len(b))):
        x = " ".join(a[i]) if i < len(a) else "<no line>"
        y = " ".join(b[i]) if i < len(b) else "<no line>"
        if x != y:
            return False, f"wrong output at line {i + 1}: expected {short(y)}, got {short(x)}"
    return False, "wrong output"
