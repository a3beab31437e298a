"""Tools for agentic rollouts. Importing this package registers the built-ins: calculator, python, search, sql."""

from rlvr.rollout.tools import calculator, python, search, sql  # noqa: F401  (registration)
from rlvr.rollout.tools.base import (
    ERROR_PREFIX,
    TOOLS,
    MalformedCall,
    Tool,
    ToolCall,
    ToolError,
    ToolResult,
    ToolSet,
    build_tool,
    call_with_timeout,
    validate_arguments,
)

__all__ = ["ERROR_PREFIX", "TOOLS", "MalformedCall", "Tool", "ToolCall", "ToolError", "ToolResult", "ToolSet",
           "build_tool", "call_with_timeout", "validate_arguments"]
