"""The judging driver: run one test of a program in a fresh sandboxed process and decide its verdict here.

`run_test` parses the test (`formats`), runs stdin/stdout tests as scripts and compares their output, and runs
assert-style and function-call tests in this process against the program's names bound through the call
channel (`channel`); then it folds in how the run ended (killed, blocked, processes left behind, anomalies).
"""

from __future__ import annotations

import builtins
import copy
import importlib
import time
from dataclasses import dataclass, field
from typing import Any

from rlvr.rewards import sandbox
from rlvr.rewards.judge.channel import Channel, ProgramAnomaly, ProgramObject, Stopped, decode_frame
from rlvr.rewards.judge.formats import as_json_shape, call_parts, outputs_match, short, test_kind
from rlvr.rewards.sandbox import ChildGone, SandboxResult, SandboxUnavailable

# Names a test may use that must never come from the program: they resolve to this process's own modules.
TRUSTED_MODULES = frozenset((
    "math", "cmath", "re", "string", "collections", "itertools", "functools", "operator", "heapq", "bisect",
    "fractions", "decimal", "statistics", "random", "json", "copy", "datetime", "typing", "dataclasses",
    "enum", "numbers", "array", "textwrap", "unicodedata",
))


@dataclass
class TestOutcome:
    passed: bool
    reason: str  # "" when passed
    flag: str | None = None  # "blocked" or "anomaly"
    fatal: bool = False  # the program does not load or the sandbox failed: every other test would fail alike
    killed: bool = False  # timeout / memory / output / cpu limit: reported as "<why> (k/n tests passed before)"
    seconds: float = 0.0
    sandbox: SandboxResult | None = field(default=None, repr=False)


def run_test(code: str, test: Any, *, timeout: float = 5.0, memory_mb: int = 512,
             max_output_bytes: int = 256_000) -> TestOutcome:
    """Run one test of `code` (a program's source) in a fresh sandboxed process; see `rlvr.rewards.judge`."""
    start = time.monotonic()
    try:
        kind = test_kind(test)
        if kind == "call":
            call_parts(test)
    except (ValueError, TypeError) as err:
        return TestOutcome(False, f"malformed test: {err}", fatal=True)
    try:
        if kind == "stdio":
            outcome = _run_stdio(code, test, timeout, memory_mb, max_output_bytes)
        else:
            outcome = _run_calls(code, test, kind, timeout, memory_mb, max_output_bytes)
    except SandboxUnavailable as err:
        outcome = TestOutcome(False, f"sandbox failed to start: {err}", fatal=True)
    except OSError as err:
        outcome = TestOutcome(False, f"sandbox failed to start: {err}", fatal=True)
    outcome.seconds = time.monotonic() - start
    return outcome


def _ended(result: SandboxResult, timeout: float) -> TestOutcome | None:
    """The outcome when the run was killed, blocked or left processes behind; None when it ended normally."""
    why = result.killed_reason
    if why is not None and why.startswith("blocked"):
        return TestOutcome(False, why, flag="blocked", sandbox=result)
    if result.leftover:
        return TestOutcome(False, f"anomaly: {result.leftover} process(es) outlived the program and were killed",
                           flag="anomaly", sandbox=result)
    if why == "sandbox server died during the run":
        return TestOutcome(False, "anomaly: the sandbox server died during the run", flag="anomaly",
                           sandbox=result)
    if why is not None:
        return TestOutcome(False, f"timeout after {timeout:g}s" if result.timed_out else why, killed=True,
                           sandbox=result)
    return None


def _run_stdio(code: str, test: dict[str, Any], timeout: float, memory_mb: int, cap: int) -> TestOutcome:
    stdin, expected = test["input"], test["output"]
    if not isinstance(stdin, str) or not isinstance(expected, str):
        raise ValueError(f"stdin/stdout test needs string 'input' and 'output'; got {short(test)}")
    with sandbox.execution(code, stdin=stdin, timeout=timeout, memory_mb=memory_mb, max_output_bytes=cap) as run:
        result = run.finish()
    ended = _ended(result, timeout)
    if ended is not None:
        return ended
    if result.exit_code:
        tail = result.stderr.strip().rsplit("\n", 1)[-1][:300]
        return TestOutcome(False, f"program crashed (exit code {result.exit_code}){': ' + tail if tail else ''}",
                           sandbox=result)
    ok, why = outputs_match(result.stdout, expected)
    return TestOutcome(ok, why, sandbox=result)


def _describe_error(err: BaseException) -> str:
    desc = getattr(err, "_rlvr_desc", None)
    if desc is not None:
        return str(desc)
    text = type(err).__name__
    try:
        msg = str(err)
    except Exception:
        msg = ""
    return (text + (": " + msg if msg else "")).replace("\n", " ")[:300]


def _namespace(table: Any, channel: Channel) -> dict[str, Any]:
    """The namespace test code runs in: the program's names as proxies or plain values; builtins and
    standard modules are always ours."""
    if type(table) is not dict:
        raise channel.flag("malformed ready message on the call channel")
    ns: dict[str, Any] = {"__builtins__": builtins, "__name__": "__rlvr_test__"}
    for name, enc in table.items():
        if type(name) is not str or not name.isidentifier() or name.startswith("__") or hasattr(builtins, name):
            continue
        if name in TRUSTED_MODULES:
            ns[name] = importlib.import_module(name)
            continue
        if type(enc) is dict and len(enc) == 1 and "__m" in enc:
            module = enc["__m"]
            if type(module) is str and module.split(".")[0] in TRUSTED_MODULES:
                ns[name] = importlib.import_module(module)
            continue  # modules the test cannot trust are simply not visible to it
        ns[name] = channel.decode(enc)
    return ns


def _run_calls(code: str, test: Any, kind: str, timeout: float, memory_mb: int, cap: int) -> TestOutcome:
    if kind == "call":
        name, args, kwargs, expected = call_parts(test)
    with sandbox.execution(code, call=True, timeout=timeout, memory_mb=memory_mb, max_output_bytes=cap) as run:
        channel = Channel(run)
        verdict: TestOutcome | None = None
        try:
            hello = decode_frame(run.receive())
            if "load_error" in hello:
                result = run.finish()
                ended = _ended(result, timeout)
                if ended is not None:
                    return ended
                return TestOutcome(False, f"program failed to run: {str(hello['load_error'])[:300]}", fatal=True,
                                   sandbox=result)
            if "ready" not in hello:
                raise channel.flag("malformed ready message on the call channel")
            ns = _namespace(hello["ready"], channel)
            if kind == "assert":
                exec(compile(test, "<test>", "exec"), ns)
                verdict = TestOutcome(True, "")
            else:
                verdict = _check_call(ns, name, args, kwargs, expected, channel)
        except Stopped:
            verdict = None  # the run's result says why
        except ChildGone:
            verdict = None
        except ProgramAnomaly as err:
            if channel.anomaly is None:
                channel.anomaly = str(err)
            verdict = TestOutcome(False, f"anomaly: {err}", flag="anomaly")
        except AssertionError as err:
            msg = _describe_error(err)
            verdict = TestOutcome(False, msg)
        except Exception as err:
            verdict = TestOutcome(False, _describe_error(err))
        result = run.finish()
        if run.anomaly and channel.anomaly is None:
            channel.anomaly = run.anomaly
        if run.frames and channel.anomaly is None and result.killed_reason is None:
            channel.anomaly = "a message on the call channel that answered no request"
        if (verdict is None and channel.anomaly is None and result.killed_reason is None and not result.leftover
                and result.exit_code == 0):  # a clean exit with the test half done: the classic "exit before failing"
            channel.anomaly = "the program's process exited in the middle of the test (exit code 0)"
        if channel.anomaly is not None:
            run.tainted = True  # defence in depth: the server that ran it is replaced, not reused
    ended = _ended(result, timeout)
    if ended is not None and ended.flag is not None:  # blocked, or processes left behind / server killed
        return ended
    if channel.anomaly is not None:  # before "killed": the judge may have killed it for the anomaly
        return TestOutcome(False, f"anomaly: {channel.anomaly}", flag="anomaly", sandbox=result)
    if ended is not None:
        return ended
    if verdict is None:
        tail = result.stderr.strip().rsplit("\n", 1)[-1][:300]
        return TestOutcome(False, f"program crashed (exit code {result.exit_code}){': ' + tail if tail else ''}",
                           sandbox=result)
    if verdict.passed and result.exit_code != 0:
        return TestOutcome(False, f"program crashed at exit (exit code {result.exit_code})", sandbox=result)
    verdict.sandbox = result
    return verdict


def _check_call(ns: dict[str, Any], name: str, args: list[Any], kwargs: dict[str, Any], expected: Any,
                channel: Channel) -> TestOutcome:
    target = ns.get(name)
    if target is None and type(ns.get("Solution")) is ProgramObject:  # LeetCode style
        target = getattr(ns["Solution"](), name)
    if type(target) is not ProgramObject:
        return TestOutcome(False, f"the program defines no function {name!r}")
    got = target(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    if as_json_shape(got) == as_json_shape(expected):
        return TestOutcome(True, "")
    return TestOutcome(False, f"wrong result: expected {short(expected)}, got {short(got)}")
