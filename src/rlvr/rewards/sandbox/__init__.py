"""Run untrusted Python (model-written code) where it cannot hurt the run or see what it must not see.

Two layers, one under the other:

1. **The OS layer** (`rlvr.rewards.isolation`): a warm *sandbox server* per verifier process runs inside
   bubblewrap with fresh user, PID, network, IPC, UTS and cgroup namespaces, no capabilities, a read-only view
   of the system directories and the interpreter (nothing else of the host: no run directory, datasets, home
   or host /tmp), a private size-limited /tmp (the disk quota for everything the program writes), and cgroup
   pids/memory limits where the machine allows. When the OS layer is unavailable the server runs as a plain
   child process (empty network namespace and a drop to `nobody` when root) and rlvr says so at start-up.
2. **The Python guard** (`guard.py`): an audit hook installed before the program is compiled that raises
   PermissionError for sockets, process creation, signals to other processes, foreign extension modules,
   writes/deletes/renames/chmods outside the work dir, reads and directory listings outside the work dir and the
   interpreter's and the system's trees (`/` and `/tmp` themselves included),
   other processes' /proc entries, devices, changing rlimits and patching the guard. The first block of each
   kind is reported on stderr as a `[rlvr-sandbox] blocked: ...` line, which becomes
   `SandboxResult.killed_reason`. Imports of ctypes, cffi, sqlite3 and a few other C modules fail with
   ImportError. Plus rlimits: CPU, address space, file size, open files, no core dumps.

The server (`zygote.py`) never runs untrusted code itself. For every run it forks a fresh child (`child.py`)
that gets a fresh empty work dir, its own pipes (passed over a Unix socket, so the server never holds the data),
the rlimits and the guard, and then runs the program. When the child ends, the server kills every other
process left in its PID namespace (nothing outlives a run), wipes the work dir and reports the exit status and
CPU time. The parent enforces the wall-clock timeout (it asks the server to kill the child) and caps
stdout/stderr.

Two ways to run a program:

- `run_python(code, stdin=...)`: a program with stdin, stdout, stderr and an exit code (the `python` tool, and
  stdin/stdout tests).
- `execution(code, call=True)`: the program is loaded as a module and then answers requests from the trusted
  parent over a private pipe pair: "call this function with these plain-data arguments", "get this
  attribute". `rlvr.rewards.judge` builds the code verifier on it: the tests run in the trusted process and
  only calls into the program cross over, so the program never sees a test, an expected value or another
  test's input, and what comes back is decoded as plain data by exact type.

The audit hook alone is a tripwire, not a proof: code in the same interpreter can get around it (e.g.
`_imp.create_builtin` makes fresh copies of the C functions the guard replaced, a lying `__fspath__` can show
the hook one path and the OS another). The OS layer is what holds if it does.

Layout, lowest first: `guard.py`, `child.py` and `zygote.py` are the source text of the programs that run in
the sandboxed interpreter (shipped as strings, never imported there); `limits.py` the rlimits, environment and
exit classification; `server.py` the warm server processes and their pool; `process.py` one run seen from the
parent (pipes, timeout, output caps, call-channel frames). This file holds the two entry points.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator
from typing import Any

from rlvr.rewards import isolation
from rlvr.rewards.sandbox.guard import BLOCK_MARKER
from rlvr.rewards.sandbox.limits import FILE_SIZE_LIMIT_MB, NPROC_LIMIT, OPEN_FILES_LIMIT
from rlvr.rewards.sandbox.process import FRAME_LIMIT, KILL_GRACE, ChildGone, Execution, SandboxResult
from rlvr.rewards.sandbox.server import (
    _POOL,
    MAX_IDLE_SERVERS,
    NOBODY,
    SERVER_MAX_RUNS,
    START_TIMEOUT,
    SandboxUnavailable,
    close_servers,
)

__all__ = [
    "BLOCK_MARKER", "FILE_SIZE_LIMIT_MB", "FRAME_LIMIT", "GUARD", "INTERPRETER", "KILL_GRACE", "MAX_IDLE_SERVERS",
    "NOBODY", "NPROC_LIMIT", "OPEN_FILES_LIMIT", "SERVER_MAX_RUNS", "START_TIMEOUT", "ChildGone", "Execution",
    "SandboxResult", "SandboxUnavailable", "close_servers", "execution", "isolation_info", "os_layer_available",
    "run_python",
]

# These two are read here at each run, so tests set them on this package (the other constants live in their
# modules and are re-exported read-only).
# The interpreter the child runs; tests may point it elsewhere (it must be the same Python version family).
INTERPRETER = sys.executable
# Tests only: False starts servers whose children skip the Python guard, to show what the OS layer holds on its
# own (as if a program had got around the guard).
GUARD = True


def os_layer_available(interpreter: str | None = None) -> bool:
    return isolation.os_layer(interpreter or INTERPRETER).available


def isolation_info() -> dict[str, object]:
    return isolation.isolation_info(INTERPRETER)


@contextlib.contextmanager
def execution(code: str, *, call: bool = False, stdin: str = "", timeout: float = 5.0,
              cpu_seconds: float | None = None, memory_mb: int = 512, max_output_bytes: int = 64_000,
              files: dict[str, str] | None = None, disk_mb: int = isolation.DISK_MB) -> Iterator[Execution]:
    """A run of `code` in a warm sandbox server; see `Execution`. Raises SandboxUnavailable when no server
    can start. The server is reused afterwards only if the run ended cleanly: the server reported, nothing
    was left behind, and the caller did not `taint` it."""
    _check_args(code, timeout, memory_mb, max_output_bytes)
    files = _check_files(files or {})
    cpu = max(1, math.ceil(cpu_seconds) if cpu_seconds is not None else math.ceil(timeout) + 1)
    for attempt in range(2):  # a warm server may have died while idle: then once more with a fresh one
        server = _POOL.acquire(INTERPRETER, disk_mb, GUARD)
        try:
            run = Execution(server, code, call=call, stdin=stdin, files=files, timeout=timeout, cpu=cpu,
                            memory_mb=memory_mb, max_output_bytes=max_output_bytes)
            break
        except OSError:
            _POOL.release(server, False)
            if attempt:
                raise
        except BaseException:
            _POOL.release(server, False)
            raise
    reusable = False
    try:
        yield run
        result = run.finish()
        reusable = (not server.broken and run.report is not None and not run.report.get("server_died")
                    and not run.report.get("dirty")
                    and result.leftover == 0 and run.anomaly is None and not run.tainted
                    and not (result.killed_reason or "").startswith("blocked"))
    finally:
        if run.finished is None:
            run.kill()
            with contextlib.suppress(Exception):
                run.finish()
        run.close()
        _POOL.release(server, reusable)


def _check_args(code: Any, timeout: float, memory_mb: int, max_output_bytes: int) -> None:
    if not isinstance(code, str):
        raise ValueError(f"run_python: code must be a str; got {type(code).__name__}")
    if not timeout > 0:
        raise ValueError(f"run_python: timeout must be > 0 seconds; got {timeout}")
    if memory_mb < 32:
        raise ValueError(f"run_python: memory_mb must be >= 32 (the interpreter needs it); got {memory_mb}")
    if max_output_bytes < 1:
        raise ValueError(f"run_python: max_output_bytes must be >= 1; got {max_output_bytes}")


def _check_files(files: dict[str, str]) -> dict[str, str]:
    out = {}
    for name, content in files.items():
        parts = [p for p in str(name).split("/") if p not in ("", ".")]
        if str(name).startswith("/") or ".." in parts or not parts:
            raise ValueError(f"run_python: files key {name!r} must be a relative path inside the work dir")
        out["/".join(parts)] = str(content)
    return out


def run_python(
    code: str,
    *,
    stdin: str = "",
    timeout: float = 5.0,
    cpu_seconds: float | None = None,
    memory_mb: int = 512,
    max_output_bytes: int = 64_000,
    files: dict[str, str] | None = None,
    disk_mb: int = isolation.DISK_MB,
) -> SandboxResult:
    """Run `code` as a Python program in the sandbox and return what happened. Never raises for anything
    the program does; raises ValueError only for bad arguments.

    `timeout` is wall-clock seconds; `cpu_seconds` (default: the timeout rounded up, plus one second) is the
    RLIMIT_CPU. The default sits above the wall clock so a single-threaded busy loop always ends as a timeout
    (equal limits race); the CPU limit is the backstop for programs that burn CPU on several threads;
    `memory_mb` the address-space limit; `max_output_bytes` caps stdout and stderr each; `files` are
    written into the work dir (relative paths) before the program starts; `disk_mb` is the size of the
    private /tmp holding the work dir (with the OS layer).
    """
    start = time.monotonic()
    try:
        with execution(code, stdin=stdin, timeout=timeout, cpu_seconds=cpu_seconds, memory_mb=memory_mb,
                       max_output_bytes=max_output_bytes, files=files, disk_mb=disk_mb) as run:
            return run.finish()
    except (SandboxUnavailable, OSError) as err:  # e.g. EAGAIN under a process limit: a failed run
        return SandboxResult(False, None, "", "", False, f"sandbox failed to start: {err}",
                             time.monotonic() - start)
