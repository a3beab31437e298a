"""The code judge: run one test of a model-written program so that the program cannot fool the verdict.

Every test gets a fresh sandboxed process (`rlvr.rewards.sandbox`), forked from a warm server, that holds the
program and nothing else: no test source, no expected value, no other test's input. The verdict is computed
here, in the trusted process, from plain data. Three formats:

- **assert-style** (`"assert f(3) == 11"`, any Python test code): the test code runs *here*. Each name the
  program defines is bound to a `ProgramObject` proxy (or, for small plain-data globals, to the value); a call
  on a proxy sends its plain-data arguments to the program's process, which runs the call and sends back the
  result. `f(3) == 11` is then evaluated here on a plain `int`. Builtins and standard modules (`math`, `re`,
  ...) are always this process's own, never the program's, so a program cannot redefine `abs` or
  `math.isclose` to fake a check.
- **function-call** (`{"call": "f", "args": [3], "expected": 11}`, also LiveCodeBench's `fn_name`/`input`/
  `output` form and LeetCode-style `class Solution`): the same channel, one call; the result is compared with
  `expected` after tuples become lists (the data came from JSON).
- **stdin/stdout** (`{"input": "1 2\\n", "output": "3\\n"}`): the program runs as a script with that stdin only;
  its stdout is compared here line by line, token by token (whitespace-tolerant, as the usual judges do).

What crosses back is JSON, decoded by exact type into `None, bool, int, float, str, list, tuple, dict, set,
frozenset, bytes, complex`; anything else stays in the program's process and is represented here by a
`ProgramObject`, which refuses to be compared, hashed, truth-tested, measured, iterated or converted. Using one
where plain data is needed is an *anomaly*: the test fails even if the test code swallows the exception.
Other anomalies: a malformed or oversized message on the call channel, the program's process exiting in the
middle of a call, processes left behind after the test. A program the guard *blocked* (a socket, a write
outside its work dir, ...) fails too. `TestOutcome.flag` says which ("blocked", "anomaly"), for telemetry.

Test code itself is trusted (it comes from the task's data, like a recipe) and runs in the verifier process.
"""

from __future__ import annotations

import builtins
import copy
import importlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from rlvr.rewards import sandbox
from rlvr.rewards.sandbox import ChildGone, SandboxResult, SandboxUnavailable

# Names a test may use that must never come from the program: they resolve to this process's own modules.
TRUSTED_MODULES = frozenset((
    "math", "cmath", "re", "string", "collections", "itertools", "functools", "operator", "heapq", "bisect",
    "fractions", "decimal", "statistics", "random", "json", "copy", "datetime", "typing", "dataclasses",
    "enum", "numbers", "array", "textwrap", "unicodedata",
))
_PLAIN_TAGS = frozenset(("__t", "__d", "__s", "__fs", "__b", "__i", "__f", "__c", "__h", "__m"))
# Exceptions from the program are re-raised here as these builtin types (so `except ValueError` in a test
# works), or as ProgramError; never as control flow (StopIteration, SystemExit, KeyboardInterrupt, ...).
_RAISABLE = frozenset(
    name for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception)
    and not issubclass(value, (StopIteration, StopAsyncIteration, Warning))
)
REPR_LIMIT = 80


class ProgramError(Exception):
    """An exception raised inside the program whose type is not a builtin one."""


class ProgramAnomaly(Exception):
    """The program's process did something a solution never needs to (see the module docstring)."""


class NotPlainData(TypeError):
    """A library object (not plain data, not defined by the program) was used where plain data was needed."""


class _Stop(Exception):
    """The program's process is gone (timeout, output limit, killed, exited): the test cannot go on."""


@dataclass
class TestOutcome:
    passed: bool
    reason: str  # "" when passed
    flag: str | None = None  # "blocked" or "anomaly"
    fatal: bool = False  # the program does not load or the sandbox failed: every other test would fail alike
    killed: bool = False  # timeout / memory / output / cpu limit: reported as "<why> (k/n tests passed before)"
    seconds: float = 0.0
    sandbox: SandboxResult | None = field(default=None, repr=False)


def short(value: Any, limit: int = REPR_LIMIT) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------------------------
# Plain data across the channel
# --------------------------------------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _loads(frame: bytes) -> dict[str, Any]:
    try:
        msg = json.loads(frame.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError, UnicodeDecodeError) as err:
        raise ProgramAnomaly(f"malformed message on the call channel ({type(err).__name__})") from None
    if type(msg) is not dict:
        raise ProgramAnomaly("malformed message on the call channel (not an object)")
    return msg


def encode(value: Any, depth: int = 0) -> Any:
    """A trusted value (a test's argument) as channel JSON. Only plain data and ProgramObjects may cross."""
    if depth > 200:
        raise TypeError("argument nested more than 200 levels deep")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return value if -(2**1000) < value < 2**1000 else {"__i": hex(value)}
    if t is float:
        return value if math.isfinite(value) else {"__f": repr(value)}
    if t is list:
        return [encode(v, depth + 1) for v in value]
    if t is tuple:
        return {"__t": [encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"__d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if t is set or t is frozenset:
        return {"__s" if t is set else "__fs": [encode(v, depth + 1) for v in value]}
    if t is bytes:
        return {"__b": value.hex()}
    if t is complex:
        return {"__c": [encode(value.real), encode(value.imag)]}
    if t is ProgramObject:
        return {"__h": object.__getattribute__(value, "_rlvr_id")}
    raise TypeError(f"a test passed a {t.__name__} to the program; only plain data can cross to it")


class Channel:
    """The trusted side of one test's call channel."""

    def __init__(self, run: sandbox.Execution):
        self.run = run
        self.anomaly: str | None = None
        self.calls = 0

    def flag(self, why: str) -> ProgramAnomaly:
        if self.anomaly is None:
            self.anomaly = why
        return ProgramAnomaly(why)

    def decode(self, value: Any, depth: int = 0) -> Any:
        """Channel JSON from the program's process -> exact builtins (and ProgramObjects). Strict: anything
        that is not one of the shapes `encode` makes is an anomaly."""
        if depth > 210:
            raise self.flag("a reply nested deeper than the channel allows")
        t = type(value)
        if value is None or t in (bool, int, float, str):
            return value
        if t is list:
            return [self.decode(v, depth + 1) for v in value]
        if t is not dict or not 1 <= len(value) <= 3:
            raise self.flag("malformed value on the call channel")
        tag = next(iter(value))
        body = value[tag]
        try:
            if tag == "__h" and type(body) is int and body >= 0 and set(value) <= {"__h", "type", "own"}:
                name = value.get("type", "?")
                return ProgramObject(self, body, str(name)[:80] if type(name) is str else "?",
                                     value.get("own", True) is not False)
            if len(value) != 1 or tag not in _PLAIN_TAGS:
                raise ValueError(tag)
            if tag == "__t" and type(body) is list:
                return tuple(self.decode(v, depth + 1) for v in body)
            if tag == "__d" and type(body) is list:
                out = {}
                for pair in body:
                    if type(pair) is not list or len(pair) != 2:
                        raise ValueError("pair")
                    key = self.decode(pair[0], depth + 1)
                    _hashable_plain(key)
                    out[key] = self.decode(pair[1], depth + 1)
                return out
            if tag in ("__s", "__fs") and type(body) is list:
                items = [self.decode(v, depth + 1) for v in body]
                for item in items:
                    _hashable_plain(item)
                return set(items) if tag == "__s" else frozenset(items)
            if tag == "__b" and type(body) is str:
                return bytes.fromhex(body)
            if tag == "__i" and type(body) is str:
                return int(body, 16)
            if tag == "__f" and body in ("nan", "inf", "-inf"):
                return float(body)
            if tag == "__c" and type(body) is list and len(body) == 2 and all(type(b) in (int, float) for b in body):
                return complex(body[0], body[1])
        except ProgramAnomaly:
            raise
        except (ValueError, TypeError, RecursionError):
            pass
        raise self.flag("malformed value on the call channel")

    def _exchange(self, payload: dict[str, Any]) -> Any:
        self.calls += 1
        try:
            reply = _loads(self.run.request(payload))
        except ChildGone as gone:
            raise _Stop(str(gone)) from None
        except ProgramAnomaly as err:
            raise self.flag(str(err)) from None
        if "value" in reply:
            value = self.decode(reply["value"])
            return value, reply.get("back")
        if "raise" in reply:
            base, kind, message = reply.get("raise"), reply.get("type"), reply.get("message")
            if not all(type(x) is str for x in (base, kind, message)):
                raise self.flag("malformed exception on the call channel")
            err: Exception = getattr(builtins, base)(message) if base in _RAISABLE else ProgramError(message)
            err._rlvr_desc = message[:300] or kind[:80]  # type: ignore[attr-defined]
            raise err
        if "unencodable" in reply:
            raise TypeError(f"the program's result cannot be sent as plain data: {str(reply['unencodable'])[:100]}")
        raise self.flag("malformed message on the call channel")

    def call(self, handle: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        payload: dict[str, Any] = {"op": "call", "id": handle, "args": encode(list(args)),
                                   "kwargs": encode(dict(kwargs))}
        mutable = [i for i, a in enumerate(args) if type(a) in (list, dict, set)]
        if mutable:
            payload["back"] = mutable
        value, back = self._exchange(payload)
        if type(back) is dict:  # the program changed a list/dict/set argument in place: so do we
            for key, enc in back.items():
                i = int(key) if type(key) is str and key.isdigit() else -1
                if i not in mutable:
                    raise self.flag("malformed message on the call channel")
                new = self.decode(enc)
                old = args[i]
                if type(new) is not type(old):
                    continue
                if type(old) is list:
                    old[:] = new
                else:
                    old.clear()
                    old.update(new)
        return value

    def getattr(self, handle: int, name: str) -> Any:
        return self._exchange({"op": "getattr", "id": handle, "name": name})[0]


def _hashable_plain(value: Any) -> None:
    if type(value) is ProgramObject:
        raise ValueError("program object as a key")
    hash(value)


class ProgramObject:
    """Stands for a value that stayed in the program's process. Calls and attribute reads are forwarded;
    everything that would let the program decide a comparison or a truth value is refused."""

    __slots__ = ("_rlvr_channel", "_rlvr_id", "_rlvr_type", "_rlvr_own")

    def __init__(self, channel: Channel, handle: int, type_name: str, own: bool = True):
        object.__setattr__(self, "_rlvr_channel", channel)
        object.__setattr__(self, "_rlvr_id", handle)
        object.__setattr__(self, "_rlvr_type", type_name)
        object.__setattr__(self, "_rlvr_own", own)  # its class was defined by the program

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return object.__getattribute__(self, "_rlvr_channel").getattr(object.__getattribute__(self, "_rlvr_id"),
                                                                     name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return object.__getattribute__(self, "_rlvr_channel").call(object.__getattribute__(self, "_rlvr_id"),
                                                                  args, kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("cannot set attributes on an object of the program")

    def __repr__(self) -> str:
        return f"<program object: {object.__getattribute__(self, '_rlvr_type')}>"

    __str__ = __repr__

    def _refuse(self, what: str) -> Any:
        kind = object.__getattribute__(self, "_rlvr_type")
        why = f"the program returned an object of type {kind} where plain data was needed ({what})"
        if object.__getattribute__(self, "_rlvr_own"):  # a class of the program's own: a fake is likely
            raise object.__getattribute__(self, "_rlvr_channel").flag(why)
        raise NotPlainData(why)  # a library type (a deque, a Decimal): a wrong answer, not an anomaly

    def __eq__(self, other: object) -> bool:
        return self._refuse("==")

    def __ne__(self, other: object) -> bool:
        return self._refuse("!=")

    def __lt__(self, other: object) -> bool:
        return self._refuse("<")

    def __le__(self, other: object) -> bool:
        return self._refuse("<=")

    def __gt__(self, other: object) -> bool:
        return self._refuse(">")

    def __ge__(self, other: object) -> bool:
        return self._refuse(">=")

    def __hash__(self) -> int:
        return self._refuse("hash")

    def __bool__(self) -> bool:
        return self._refuse("truth value")

    def __len__(self) -> int:
        return self._refuse("len")

    def __iter__(self) -> Any:
        return self._refuse("iteration")

    def __contains__(self, item: object) -> bool:
        return self._refuse("in")

    def __getitem__(self, key: object) -> Any:
        return self._refuse("indexing")

    def __int__(self) -> int:
        return self._refuse("int")

    def __float__(self) -> float:
        return self._refuse("float")

    def __index__(self) -> int:
        return self._refuse("index")

    def __complex__(self) -> complex:
        return self._refuse("complex")

    def __abs__(self) -> Any:
        return self._refuse("abs")

    def __neg__(self) -> Any:
        return self._refuse("-")

    def __round__(self, n: int | None = None) -> Any:
        return self._refuse("round")

    def __add__(self, other: object) -> Any:
        return self._refuse("+")

    __radd__ = __add__

    def __sub__(self, other: object) -> Any:
        return self._refuse("-")

    __rsub__ = __sub__

    def __mul__(self, other: object) -> Any:
        return self._refuse("*")

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> Any:
        return self._refuse("/")

    __rtruediv__ = __truediv__

    def __floordiv__(self, other: object) -> Any:
        return self._refuse("//")

    __rfloordiv__ = __floordiv__

    def __mod__(self, other: object) -> Any:
        return self._refuse("%")

    __rmod__ = __mod__

    def __pow__(self, other: object, mod: object = None) -> Any:
        return self._refuse("**")

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self._refuse("pickle/copy")


# --------------------------------------------------------------------------------------------------------------
# Test formats
# --------------------------------------------------------------------------------------------------------------


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
        name, args, kwargs, _ = _call_parts(test)
        inner = ", ".join([short(a, 30) for a in args] + [f"{k}={short(v, 30)}" for k, v in kwargs.items()])
        text = f"{name}({inner})"
    else:
        text = "stdin " + short(test["input"], 60)
    return text if len(text) <= 100 else text[:97] + "..."


def _call_parts(test: dict[str, Any]) -> tuple[str, list[Any], dict[str, Any], Any]:
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


def _as_json_shape(value: Any) -> Any:
    """Tuples as lists, recursively (expected values that came from JSON have no tuples)."""
    t = type(value)
    if t is tuple or t is list:
        return [_as_json_shape(v) for v in value]
    if t is dict:
        return {k: _as_json_shape(v) for k, v in value.items()}
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


# --------------------------------------------------------------------------------------------------------------
# Running one test
# --------------------------------------------------------------------------------------------------------------


def run_test(code: str, test: Any, *, timeout: float = 5.0, memory_mb: int = 512,
             max_output_bytes: int = 256_000) -> TestOutcome:
    """Run one test of `code` (a program's source) in a fresh sandboxed process; see the module docstring."""
    start = time.monotonic()
    try:
        kind = test_kind(test)
        if kind == "call":
            _call_parts(test)
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
        name, args, kwargs, expected = _call_parts(test)
    with sandbox.execution(code, call=True, timeout=timeout, memory_mb=memory_mb, max_output_bytes=cap) as run:
        channel = Channel(run)
        verdict: TestOutcome | None = None
        try:
            hello = _loads(run.receive())
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
        except _Stop:
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
    if _as_json_shape(got) == _as_json_shape(expected):
        return TestOutcome(True, "")
    return TestOutcome(False, f"wrong result: expected {short(expected)}, got {short(got)}")

