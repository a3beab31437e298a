"""One program run in a warm sandbox server, seen from the parent: hand the server the program, its stdin and
fresh pipes, move bytes until it ends, enforce the wall clock (ask the server to kill the child), cap stdout and
stderr, frame the call channel, and say what happened (`SandboxResult`).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlvr.rewards.sandbox.limits import exit_reason, rlimits
from rlvr.rewards.sandbox.server import _Server

FRAME_LIMIT = 16 * 2**20  # largest message the program's process may send over the call channel
KILL_GRACE = 3.0  # seconds the server gets to report a killed child before it is itself replaced


@dataclass
class SandboxResult:
    """What happened to one sandboxed run. `ok` means exit code 0 and nothing was killed or blocked."""

    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    killed_reason: str | None  # "timeout", "output limit", "memory limit", "cpu limit", "blocked: socket ..."
    seconds: float
    leftover: int = 0  # processes the program left behind, killed by the server when it ended
    os_layer: bool = False  # the run had the OS isolation layer


class ChildGone(Exception):
    """The program's process ended (or was killed) while the parent waited for a reply."""


def _memfd(name: str, data: bytes) -> int:
    try:
        fd = os.memfd_create(f"rlvr-{name}", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        f = tempfile.TemporaryFile()
        fd = os.dup(f.fileno())
        f.close()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class Execution:
    """One program run in a warm sandbox server: `call=False` runs it as a script with stdin; `call=True` loads
    it as a module and exchanges length-prefixed JSON frames with it (`receive`, `request`). `finish()` ends
    the run and says what happened. Use through `execution(...)`."""

    def __init__(self, server: _Server, code: str, *, call: bool, stdin: str, files: dict[str, str],
                 timeout: float, cpu: int, memory_mb: int, max_output_bytes: int):
        self.server, self.call_mode = server, call
        self.start = time.monotonic()
        self.deadline = self.start + timeout
        self.cpu_limit = cpu
        self.cap = max_output_bytes
        self.out, self.err, self.resp = bytearray(), bytearray(), bytearray()
        self.frames: deque[bytes] = deque()
        self.pending = bytearray()
        self.report: dict[str, Any] | None = None
        self.reason: str | None = None
        self.anomaly: str | None = None
        self.kill_sent = False
        self.tainted = False  # the caller saw something off: do not reuse the server
        self.resp_closed = False
        self.finished: SandboxResult | None = None
        limits = rlimits(cpu, memory_mb)
        mine: list[int] = []
        theirs: list[int] = []
        try:
            theirs.append(_memfd("payload", json.dumps({"program": code, "files": files}).encode("utf-8")))
            theirs.append(_memfd("stdin", stdin.encode("utf-8")))
            for _ in range(2 + 2 * call):
                r, w = os.pipe()
                mine.append(r)
                mine.append(w)
            out_r, out_w, err_r, err_w = mine[:4]
            theirs += [out_w, err_w]
            if call:
                req_r, req_w, resp_r, resp_w = mine[4:8]
                theirs += [req_r, resp_w]
            server.runs += 1
            server.send({"op": "run", "id": server.runs, "call": call, "limits": limits,
                         "drop_uid": server.drop_uid}, theirs)
        except BaseException:
            for fd in mine + theirs:
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise
        for fd in theirs:
            os.close(fd)
        self.sel = selectors.DefaultSelector()
        self.fds = [out_r, err_r]
        self.sel.register(out_r, selectors.EVENT_READ, "out")
        self.sel.register(err_r, selectors.EVENT_READ, "err")
        self.sel.register(server.sock, selectors.EVENT_READ, "ctl")
        self.req_w: int | None = None
        if call:
            self.fds += [req_w, resp_r]
            self.req_w = req_w
            self.sel.register(resp_r, selectors.EVENT_READ, "resp")
        for fd in self.fds:
            os.set_blocking(fd, False)
        self.open_streams = {"out", "err", "resp"} if call else {"out", "err"}

    # -- the loop ----------------------------------------------------------------------------------------------

    def _pump(self, until: Callable[[], bool], deadline: float) -> bool:
        """Move bytes until `until()` holds (True), or the deadline passes (False)."""
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, _ in self.sel.select(left):
                kind = key.data
                if kind == "ctl":
                    self._on_ctl()
                elif kind == "req":
                    self._write_pending()
                else:
                    self._read(key.fd, kind)
        return True

    def _on_ctl(self) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(self.server.sock, 1 << 16, 4)
        except OSError:
            data, fds = b"", []
        for fd in fds:
            os.close(fd)
        if not data:  # the server died (killed by the program, or its cgroup's memory limit)
            self.server.broken = True
            self.sel.unregister(self.server.sock)
            self.report = {"exit": None, "cpu": 0.0, "leftover": 0, "server_died": True}
            return
        msg = json.loads(data)
        if "exit" in msg:
            self.report = msg

    def _read(self, fd: int, kind: str) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.sel.unregister(fd)
            self.open_streams.discard(kind)
            return
        if kind == "resp":
            if self.resp_closed:  # after an oversized frame the stream cannot be framed any more: drop it
                return
            self.resp += chunk
            while len(self.resp) >= 4:
                n = int.from_bytes(self.resp[:4], "big")
                if n > FRAME_LIMIT:
                    self.anomaly = self.anomaly or f"a {n}-byte message on the call channel (limit {FRAME_LIMIT})"
                    self.kill()
                    self.resp.clear()
                    self.resp_closed = True
                    break
                if len(self.resp) < 4 + n:
                    break
                self.frames.append(bytes(self.resp[4 : 4 + n]))
                del self.resp[: 4 + n]
            return
        buf = self.out if kind == "out" else self.err
        room = self.cap - len(buf)
        buf += chunk[: max(room, 0)]
        if len(chunk) > room and self.reason is None:
            self.reason = "output limit"
            self.kill()

    def _write_pending(self) -> None:
        assert self.req_w is not None
        try:
            n = os.write(self.req_w, self.pending)
        except BlockingIOError:
            return
        except OSError:  # the child closed its end (it exited)
            self.pending.clear()
            n = 0
        del self.pending[:n]
        if not self.pending:
            self.sel.unregister(self.req_w)

    def kill(self) -> None:
        if not self.kill_sent and not self.server.broken:
            self.kill_sent = True
            try:
                self.server.send({"op": "kill"})
            except OSError:
                self.server.broken = True

    # -- call mode -----------------------------------------------------------------------------------------

    def receive(self) -> bytes:
        """The next frame from the program's process; raises ChildGone with the reason when there is none."""
        ended = self._pump(lambda: bool(self.frames) or self.report is not None or self.reason is not None
                           or "resp" not in self.open_streams, self.deadline)
        if self.frames:
            return self.frames.popleft()
        if not ended:
            self.reason = self.reason or "timeout"
            self.kill()
        elif self.report is None and self.reason is None:
            # end of file on the call channel: the process is ending, or the program closed the channel
            self._pump(lambda: self.report is not None, min(self.deadline, time.monotonic() + 0.5))
            if self.report is None:
                self.anomaly = self.anomaly or "the program closed its call channel"
                self.kill()
        raise ChildGone(self.reason or "exited")

    def request(self, payload: dict[str, Any]) -> bytes:
        """Send one request frame and wait for the reply frame."""
        if self.report is not None or self.reason is not None:
            raise ChildGone(self.reason or "exited")
        data = json.dumps(payload, allow_nan=False).encode("utf-8")
        first = not self.pending
        self.pending += len(data).to_bytes(4, "big") + data
        if first and self.req_w is not None:
            self.sel.register(self.req_w, selectors.EVENT_WRITE, "req")
        return self.receive()

    # -- the end -------------------------------------------------------------------------------------------

    def finish(self) -> SandboxResult:
        if self.finished is not None:
            return self.finished
        if self.req_w is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(self.req_w)
            with contextlib.suppress(OSError):
                os.close(self.req_w)
            self.fds.remove(self.req_w)
            self.req_w = None
        if not self._pump(lambda: self.report is not None, self.deadline):
            self.reason = self.reason or "timeout"
        if self.report is None:
            self.kill()
            self._pump(lambda: self.report is not None, time.monotonic() + KILL_GRACE)
        if self.report is None:  # the server did not answer: replace it
            self.server.broken = True
            self.report = {"exit": None, "cpu": 0.0, "leftover": 0, "server_died": True}
        # what the program wrote before it ended (every writer is gone once the server has swept)
        self._pump(lambda: not self.open_streams or self.reason == "output limit",
                   time.monotonic() + (0.5 if not self.server.broken else 0.05))
        status = self.report.get("exit")
        cpu = float(self.report.get("cpu") or 0.0)
        stdout = self.out.decode("utf-8", "replace")
        stderr = self.err.decode("utf-8", "replace")
        leftover = int(self.report.get("leftover") or 0)
        if self.report.get("server_died") and self.reason is None:
            self.reason = "sandbox server died during the run"
        killed = self.reason or exit_reason(status, stderr, cpu, self.cpu_limit)
        self.finished = SandboxResult(
            ok=status == 0 and killed is None,
            exit_code=status,
            stdout=stdout,
            stderr=stderr,
            timed_out=self.reason == "timeout",
            killed_reason=killed,
            seconds=time.monotonic() - self.start,
            leftover=leftover,
            os_layer=self.server.os_layer,
        )
        return self.finished

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sel.unregister(self.server.sock)
        self.sel.close()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []
