"""What one sandboxed run may use (rlimits, environment) and how running out of it shows in how the run ended."""

from __future__ import annotations

import signal

from rlvr.rewards.sandbox.guard import BLOCK_MARKER

FILE_SIZE_LIMIT_MB = 16
OPEN_FILES_LIMIT = 256
NPROC_LIMIT = 64  # only applied after dropping to `nobody` without the OS layer (root ignores RLIMIT_NPROC)


def rlimits(cpu: int, memory_mb: int) -> list[tuple[str, int, int]]:
    """The (resource name, soft, hard) limits the guard sets in the child before the program runs."""
    return [
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", memory_mb * 2**20, memory_mb * 2**20),
        ("RLIMIT_FSIZE", FILE_SIZE_LIMIT_MB * 2**20, FILE_SIZE_LIMIT_MB * 2**20),
        ("RLIMIT_NOFILE", OPEN_FILES_LIMIT, OPEN_FILES_LIMIT),
    ]


def base_env() -> dict[str, str]:
    """The whole environment of the server and its children: one thread per math library, a fixed hash seed."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
    }


def exit_reason(status: int | None, stderr: str, cpu_used: float, cpu_limit: int) -> str | None:
    if status is not None and status < 0:
        sig = -status
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_used >= cpu_limit - 0.05):
            return "cpu limit"
        if sig == signal.SIGXFSZ:
            return "file size limit"
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    i = stderr.find(BLOCK_MARKER)
    if i >= 0:
        return "blocked: " + stderr[i + len(BLOCK_MARKER):].split("\n", 1)[0].strip()
    if status:
        tail = stderr.rstrip().rsplit("\n", 1)[-1]
        if tail.startswith("MemoryError") or "Cannot allocate memory" in tail:
            return "memory limit"
        if "File too large" in tail:
            return "file size limit"
        if "No space left on device" in tail:
            return "disk quota"
    return None
