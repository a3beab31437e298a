"""Tools for agentic rollouts: a named callable with a JSON schema for its arguments and a timeout.

A tool is a registered class (`TOOLS`). Its keyword-only constructor parameters are its config knobs
(`agent.tools: [{name: sql, path: data.db}]`); `call(args) -> str` does the work. `ToolSet.execute` is the
only way a model's call reaches a tool, and it never raises: a malformed call, an unknown tool, arguments that
do not fit the schema, an exception or a call that outlives its timeout all come back as an error result,
which the model sees as an observation starting with `Error:`.

Timeouts: each call runs in its own daemon thread and is waited for `tool.timeout` seconds (plus a small grace
for tools that enforce the limit themselves, like `python`, whose sandbox kills the child on time). A call still
running after that is abandoned: its episode gets a timeout error and moves on. Built-in tools stop on their own
soon after their deadline (sandbox kill, SQLite progress handler, bounded arithmetic); a custom tool that can
block forever should enforce its own deadline, or it keeps one thread busy.
"""

from __future__ import annotations

import abc
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlvr.registry import Registry

TOOLS: Registry = Registry("tool")

ERROR_PREFIX = "Error: "


class ToolError(Exception):
    """Raised by a tool for a problem the model caused (bad expression, bad query); its text is shown to it."""


class Tool(abc.ABC):
    """A tool the model can call. Subclasses set `name`, `description`, `parameters` and implement `call`."""

    name: ClassVar[str] = "tool"
    description: ClassVar[str] = ""
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}, "required": []}
    timeout: float = 10.0  # seconds one call may take
    grace: float = 0.0  # extra seconds waited for tools that enforce `timeout` themselves

    @abc.abstractmethod
    def call(self, args: dict[str, Any]) -> str:
        """Run the tool on validated `args` and return its output text. Raise ToolError for a bad request."""

    def schema(self) -> dict[str, Any]:
        """The OpenAI/Hugging Face function schema (what `apply_chat_template(tools=...)` expects)."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def close(self) -> None:
        """Release what the tool holds (nothing by default)."""
        return None


@dataclass
class ToolCall:
    """A parsed call: tool name and arguments, with the raw text it came from."""

    name: str
    arguments: dict[str, Any]
    raw: str = ""


@dataclass
class MalformedCall:
    """A `<tool_call>` block that could not be parsed; `error` says why (shown to the model)."""

    error: str
    raw: str = ""


@dataclass
class ToolResult:
    """What one call produced. `output` is what the model sees; `error` is None on success."""

    name: str | None
    output: str
    error: str | None = None
    latency_s: float = 0.0
    timed_out: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "error": self.error, "latency_s": round(self.latency_s, 6),
                "timed_out": self.timed_out}


class ToolTimeout(Exception):
    pass


def call_with_timeout(fn: Callable[[], Any], timeout: float, name: str = "tool") -> Any:
    """fn() in a daemon thread, waited for at most `timeout` seconds; raises ToolTimeout if still running."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err

    thread = threading.Thread(target=target, name=f"rlvr-tool-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ToolTimeout
    if "error" in box:
        raise box["error"]
    return box.get("value")


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "array": (list,),
    "object": (dict,), "null": (type(None),),
}


def validate_arguments(schema: dict[str, Any], args: Any) -> list[str]:
    """Problems of `args` against a JSON schema of the subset tools use: an object with typed `properties`,
    `required` keys, `enum`s, and no unknown keys unless `additionalProperties` is true. Empty when valid."""
    if not isinstance(args, dict):
        return [f"arguments must be a JSON object; got {type(args).__name__}"]
    props = schema.get("properties", {})
    problems = [f"missing required argument '{k}'" for k in schema.get("required", []) if k not in args]
    for key, value in args.items():
        spec = props.get(key)
        if spec is None:
            if not schema.get("additionalProperties", False):
                problems.append(f"unknown argument '{key}' (expected: {', '.join(props) or 'none'})")
            continue
        types = spec.get("type")
        if types is not None:
            allowed = [types] if isinstance(types, str) else list(types)
            ok = any(isinstance(value, _JSON_TYPES.get(t, ())) for t in allowed)
            if isinstance(value, bool) and "boolean" not in allowed:
                ok = False  # JSON true is not a number
            if not ok:
                problems.append(f"argument '{key}' must be {' or '.join(allowed)}; got {type(value).__name__}")
                continue
        if "enum" in spec and value not in spec["enum"]:
            problems.append(f"argument '{key}' must be one of {spec['enum']}; got {value!r}")
    return problems


class ToolSet:
    """The tools of one environment, by name. `execute` runs a parsed call and never raises."""

    def __init__(self, tools: Sequence[Tool]):
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise ValueError(f"agent.tools: tool '{tool.name}' is listed twice")
            self.tools[tool.name] = tool

    def __len__(self) -> int:
        return len(self.tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    def execute(self, call: ToolCall | MalformedCall) -> ToolResult:
        if isinstance(call, MalformedCall):
            return _error(None, call.error)
        tool = self.tools.get(call.name)
        if tool is None:
            return _error(call.name, f"unknown tool '{call.name}'; available: {', '.join(self.tools) or 'none'}")
        problems = validate_arguments(tool.parameters, call.arguments)
        if problems:
            return _error(tool.name, f"bad arguments for '{tool.name}': {'; '.join(problems)}")
        start = time.perf_counter()
        try:
            output = call_with_timeout(lambda: tool.call(dict(call.arguments)), tool.timeout + tool.grace, tool.name)
        except ToolTimeout:
            result = _error(tool.name, f"tool '{tool.name}' timed out after {tool.timeout:g}s")
            result.timed_out = True
        except ToolError as err:
            result = _error(tool.name, str(err))
        except Exception as err:  # a tool bug costs this call, never the run
            result = _error(tool.name, f"tool '{tool.name}' failed: {type(err).__name__}: {err}")
        else:
            result = ToolResult(tool.name, output if isinstance(output, str) else json.dumps(output, default=str))
        result.latency_s = time.perf_counter() - start
        return result

    def close(self) -> None:
        for tool in self.tools.values():
            tool.close()


def _error(name: str | None, message: str) -> ToolResult:
    return ToolResult(name, ERROR_PREFIX + message, error=message)


def build_tool(name: str, params: dict[str, Any] | None = None, where: str = "agent.tools") -> Tool:
    return TOOLS.build(name, params or {}, where=where)
