"""The warm sandbox servers of this process: start one (bubblewrap + the zygote program, or the zygote alone
without the OS layer), keep idle ones in a pool keyed by (interpreter, disk, guard, OS layer), retire them.

A server runs one program at a time (`process.Execution` drives a run); it is replaced after `SERVER_MAX_RUNS`
runs or whenever a run did not end cleanly. Idle servers stop at exit, and a forked child forgets its parent's.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any

from rlvr.rewards import isolation
from rlvr.rewards.sandbox.guard import GUARD_SOURCE, NO_GUARD_SOURCE
from rlvr.rewards.sandbox.limits import NPROC_LIMIT, base_env
from rlvr.rewards.sandbox.zygote import ZYGOTE_SOURCE
from rlvr.tempdirs import owned_tempdir, remove_tree, sweep_stale

NOBODY = isolation.NOBODY
SERVER_MAX_RUNS = 2000  # a warm server is replaced after this many runs
MAX_IDLE_SERVERS = 16  # per process (the python tool runs on up to agent.tool_workers threads)
START_TIMEOUT = 60.0


# --------------------------------------------------------------------------------------------------------
# Probes (once per process): what isolation this machine allows.
# --------------------------------------------------------------------------------------------------------


@functools.cache
def _netns_prefix() -> tuple[str, ...]:
    """`unshare -n` when it works here (Linux, root, util-linux present); else nothing. Without the OS layer
    only."""
    return (shutil.which("unshare") or "unshare", "-n") if isolation._netns_ok() else ()


def _drop_uid(interpreter: str) -> int | None:
    """`nobody` when the parent is root and the interpreter works for `nobody` (its files are readable)."""
    return NOBODY if isolation.nobody_can_run(interpreter) else None


class SandboxUnavailable(RuntimeError):
    """No sandbox server could start (or RLVR_SANDBOX=bwrap and the OS layer is unavailable)."""


# --------------------------------------------------------------------------------------------------------
# The parent side: warm servers, one run at a time each.
# --------------------------------------------------------------------------------------------------------

_ids = itertools.count(1)


class _Server:
    """One sandbox server process (bubblewrap + the zygote, or the zygote alone without the OS layer)."""

    def __init__(self, interpreter: str, disk_mb: int, guard: bool = True):
        self.interpreter, self.disk_mb, self.guard = interpreter, disk_mb, guard
        self.runs = 0
        self.broken = False
        self.cgroups: list[str] = []
        self.host_root: str | None = None
        layer = isolation.os_layer(interpreter)
        if not layer.available and isolation.mode() == "bwrap":
            raise SandboxUnavailable(f"RLVR_SANDBOX=bwrap, but the OS isolation layer is unavailable: {layer.reason}")
        self.os_layer = layer.available
        self.drop_uid = None if layer.available else _drop_uid(interpreter)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            if layer.available:
                root = "/tmp"
                isolation.sweep_stale_cgroups(layer)
                self.cgroups = isolation.make_cgroups(layer, f"rlvr-sandbox-{os.getpid()}-{next(_ids)}")
                prefix = [*isolation.launch_prefix(layer, self.cgroups), *isolation.bwrap_command(layer, disk_mb)]
            else:
                _sweep_stale_server_dirs()
                # the owner's pid in the name: a later process's sweep knows when the owner is gone
                self.host_root = root = owned_tempdir(_DIR_PREFIX)
                if self.drop_uid is not None:
                    os.chown(root, self.drop_uid, self.drop_uid)
                prefix = list(_netns_prefix())
            keep = isolation.kept_under_tmp(layer) if layer.available else []
            cfg = {"ctl": theirs.fileno(), "guard": GUARD_SOURCE if guard else NO_GUARD_SOURCE, "root": root, "keep": keep,
                   "pid_namespace": layer.available, "remove_root": self.host_root is not None,
                   "env": base_env(), "nproc": NPROC_LIMIT}
            command = [*prefix, interpreter, "-I", "-B", "-c", ZYGOTE_SOURCE, json.dumps(cfg)]
            self._log = tempfile.TemporaryFile()
            self.proc = subprocess.Popen(command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=self._log, cwd="/",
                                         env=base_env(), start_new_session=True)
        except BaseException:
            theirs.close()
            self.close(kill=True)
            raise
        theirs.close()
        self.sock.settimeout(START_TIMEOUT)
        try:
            hello = json.loads(self.sock.recv(1 << 16) or b"null")
        except (OSError, ValueError):
            hello = None
        if not isinstance(hello, dict) or "ready" not in hello:
            why = self._stderr_tail() or f"exit code {self.proc.poll()}"
            self.close(kill=True)
            raise SandboxUnavailable(f"sandbox server failed to start: {why}")
        self.sock.settimeout(None)
        self.uid = hello.get("uid")

    def _stderr_tail(self) -> str:
        try:
            self._log.seek(0)
            return self._log.read()[-2000:].decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def alive(self) -> bool:
        return not self.broken and self.proc.poll() is None

    def send(self, obj: dict[str, Any], fds: list[int] = ()) -> None:  # type: ignore[assignment]
        socket.send_fds(self.sock, [json.dumps(obj).encode()], list(fds))

    def close(self, kill: bool = False) -> None:
        """Stop the server (closing its socket ends it; SIGKILL its process group if it lingers)."""
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.close()
        proc = getattr(self, "proc", None)
        if proc is not None:
            if not kill:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        if getattr(self, "_log", None) is not None:
            with contextlib.suppress(OSError):
                self._log.close()
        if self.cgroups:
            for _ in range(50):
                isolation.remove_cgroups(self.cgroups)
                if not any(os.path.exists(d) for d in self.cgroups):
                    break
                time.sleep(0.01)
        if self.host_root:
            remove_tree(self.host_root)

    def forget(self) -> None:
        """In a forked child: drop our copy of the socket without touching the server (the parent owns it)."""
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.close()


class _Pool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Server] = []
        self.pid = os.getpid()

    def acquire(self, interpreter: str, disk_mb: int, guard: bool = True) -> _Server:
        key = (interpreter, disk_mb, guard, isolation.os_layer(interpreter).available)
        with self.lock:
            while self.idle:
                for i, server in enumerate(self.idle):
                    if (server.interpreter, server.disk_mb, server.guard, server.os_layer) == key:
                        del self.idle[i]
                        break
                else:
                    break
                if server.alive():
                    return server
                server.close(kill=True)
        return _Server(interpreter, disk_mb, guard)

    def release(self, server: _Server, reusable: bool) -> None:
        if reusable and server.alive() and server.runs < SERVER_MAX_RUNS:
            with self.lock:
                if len(self.idle) < MAX_IDLE_SERVERS:
                    self.idle.append(server)
                    return
        server.close(kill=not reusable)

    def close_all(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for server in idle:
            server.close()

    def after_fork(self) -> None:
        self.lock = threading.Lock()
        for server in self.idle:
            server.forget()
        self.idle = []
        self.pid = os.getpid()


_POOL = _Pool()
atexit.register(_POOL.close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.after_fork)


def close_servers() -> None:
    """Stop every idle sandbox server of this process (they restart on demand)."""
    _POOL.close_all()


_DIR_PREFIX = "rlvr-sandbox-"


def _sweep_stale_server_dirs() -> None:
    """Remove the server directories (`rlvr-sandbox-<owner pid>-*` in the temp dir) whose owner process is gone,
    e.g. a verifier worker killed with SIGKILL before its server could clean up; as `isolation.sweep_stale_cgroups`
    does for cgroups. Directories of live owners (other runs on this machine) are left alone."""
    sweep_stale(_DIR_PREFIX)
