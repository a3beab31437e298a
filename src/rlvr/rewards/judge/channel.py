"""The trusted side of a test's call channel: plain data across it, and `ProgramObject` for what stays behind.

Arguments go to the program's process as JSON (`encode`); replies are decoded by exact type into `None, bool,
int, float, str, list, tuple, dict, set, frozenset, bytes, complex` (`Channel.decode`), the tags matching the
child's encoder in `rlvr.rewards.sandbox.child`. Anything else stays in the program's process and is a
`ProgramObject` here, which refuses to be compared, hashed, truth-tested or converted. It may be iterated
(`list(...)`, `for`, `sum`, `next`) and measured (`len`): the iterator stays in the program's process and each
item crosses as the result of one request, decoded like any other, up to `ITEM_LIMIT` items per iterator and
within the test's usual time limit.
"""

from __future__ import annotations

import builtins
import json
import math
from typing import Any

from rlvr.rewards import sandbox
from rlvr.rewards.sandbox import ChildGone

# The most items a test may take from one of the program's iterators (a never-ending one fails here, or on the
# test's time limit, whichever comes first).
ITEM_LIMIT = 100_000
_PLAIN_TAGS = frozenset(("__t", "__d", "__s", "__fs", "__b", "__i", "__f", "__c", "__h", "__m"))
# Exceptions from the program are re-raised here as these builtin types (so `except ValueError` in a test
# works), or as ProgramError; never as control flow (StopIteration, SystemExit, KeyboardInterrupt, ...).
_RAISABLE = frozenset(
    name for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception)
    and not issubclass(value, (StopIteration, StopAsyncIteration, Warning))
)


class ProgramError(Exception):
    """An exception raised inside the program whose type is not a builtin one."""


class ProgramAnomaly(Exception):
    """The program's process did something a solution never needs to (see `rlvr.rewards.judge`)."""


class NotPlainData(TypeError):
    """A library object (not plain data, not defined by the program) was used where plain data was needed."""


class Stopped(Exception):
    """The program's process is gone (timeout, output limit, killed, exited): the test cannot go on."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def decode_frame(frame: bytes) -> dict[str, Any]:
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
        self.items: dict[int, int] = {}  # items taken so far, per iterator handle

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
            reply = decode_frame(self.run.request(payload))
        except ChildGone as gone:
            raise Stopped(str(gone)) from None
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
        if reply.get("stop") is True and len(reply) == 1:
            return _STOP, None
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

    def _plain(self, op: str, handle: int) -> Any:
        value = self._exchange({"op": op, "id": handle})[0]
        if value is _STOP:
            raise self.flag("malformed message on the call channel")
        return value

    def iter(self, handle: int) -> Any:
        """`iter()` of a program object: its iterator, which stays in the program's process."""
        it = self._plain("iter", handle)
        if type(it) is not ProgramObject:
            raise self.flag("malformed message on the call channel")
        return it

    def next(self, handle: int) -> Any:
        """The next item of a program iterator, decoded as plain data; StopIteration at its end."""
        value = self._exchange({"op": "next", "id": handle})[0]
        if value is _STOP:
            raise StopIteration
        taken = self.items[handle] = self.items.get(handle, 0) + 1
        if taken > ITEM_LIMIT:
            raise ValueError(f"the program's iterator yielded more than {ITEM_LIMIT} items")
        return value

    def len(self, handle: int) -> int:
        n = self._plain("len", handle)
        if type(n) is not int or n < 0:
            raise self.flag("malformed message on the call channel")
        return n


_STOP = object()  # the program's iterator is exhausted


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
        return object.__getattribute__(self, "_rlvr_channel").len(object.__getattribute__(self, "_rlvr_id"))

    def __iter__(self) -> Any:
        return object.__getattribute__(self, "_rlvr_channel").iter(object.__getattribute__(self, "_rlvr_id"))

    def __next__(self) -> Any:
        return object.__getattribute__(self, "_rlvr_channel").next(object.__getattribute__(self, "_rlvr_id"))

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
