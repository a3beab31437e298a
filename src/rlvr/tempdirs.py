"""Temporary directories that belong to one process: named `<prefix><owner pid>-<random>` in the temp dir,
removed by their owner when it closes them, and swept by the next owner when the last one died without closing
(SIGKILL, a crash). The code sandbox's server directories and vLLM's IPC sockets live in such directories."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any


def owned_tempdir(prefix: str, base: str | None = None) -> str:
    """A new private directory `<base>/<prefix><this pid>-<random>` (base: the temp dir)."""
    return os.path.realpath(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base))


def sweep_stale(prefix: str, base: str | None = None) -> list[str]:
    """Remove the `<prefix><pid>-*` directories whose owner process is gone; returns what was removed. Those of
    live owners (other runs on this machine) and names without a pid are left alone."""
    base = base or tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return []
    removed = []
    for name in names:
        pid, sep, _ = name[len(prefix):].partition("-") if name.startswith(prefix) else ("", "", "")
        if not sep or not pid.isdigit() or int(pid) == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        path = os.path.join(base, name)
        if os.path.isdir(path) and not os.path.islink(path):
            remove_tree(path)
            removed.append(path)
    return removed


def remove_tree(path: str) -> None:
    """Remove a directory tree even if a program made parts of it unreadable."""

    def fix(func: Any, p: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):  # what stays unremovable is left; the caller cannot do better
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)

    shutil.rmtree(path, onerror=fix)
