"""`python`: run a model-written program in rlvr's sandbox (`rlvr.rewards.sandbox.run_python`) only."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rlvr.rollout.tools.base import TOOLS, Tool, ToolError


@TOOLS.register("python")
class PythonTool(Tool):
    """Runs `code` with `run_python` (child process, timeout, memory limit, no network, private temp dir, whole
    process group killed). Returns stdout. A program that fails (exception, timeout, blocked action) is a tool
    error: the model sees `Error: <reason>`, the end of stderr and any stdout."""

    name = "python"
    description = "Run a Python program and return what it prints. Use print() to show results."
    parameters = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "A complete Python program."}},
        "required": ["code"],
    }
    grace = 2.0  # the sandbox enforces `timeout` itself; this only covers process start and clean-up

    def __init__(self, *, timeout: Annotated[float, Field(gt=0)] = 5.0, memory_mb: Annotated[int, Field(ge=32)] = 512,
                 max_output_chars: Annotated[int, Field(ge=1)] = 4000):
        self.timeout, self.memory_mb, self.max_output_chars = timeout, memory_mb, max_output_chars

    def call(self, args: dict[str, Any]) -> str:
        from rlvr.rewards.sandbox import run_python

        result = run_python(args["code"], timeout=self.timeout, memory_mb=self.memory_mb,
                            max_output_bytes=self.max_output_chars * 4)
        out = result.stdout[: self.max_output_chars]
        if result.ok:
            return out if out.strip() else "(no output)"
        reason = result.killed_reason or f"exit code {result.exit_code}"
        if result.timed_out or result.killed_reason == "cpu limit":
            # A busy loop meets the wall clock and RLIMIT_CPU (both `timeout`) at about the same moment; which
            # one fires first is a race, and to the model both mean the same: the program ran out of time.
            reason = f"timed out after {self.timeout:g}s" + (" (CPU limit)" if not result.timed_out else "")
        tail = result.stderr.strip()[-600:]
        raise ToolError("\n".join(p for p in (f"program failed: {reason}", tail,
                                              f"stdout: {out.rstrip()}" if out.strip() else "") if p))
