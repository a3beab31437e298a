"""Run a task's verifier on many responses at once, in worker processes, each call under a timeout.

Workers are forked (start method `fork`), so they inherit the task object as it is; only the response texts
and task records travel to them (pickled), and `VerifyResult`s come back. A verifier that raises, hangs
past the timeout or kills its process costs that one call reward 0 with a reason; hung and dead workers are
replaced, and the next call works as before.

    with VerifierPool(task, workers=4, timeout=10) as pool:
        results = pool.map([(sample.text, group.record) for sample in group.samples])
"""

from __future__ import annotations

import faulthandler
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterable
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

from rlvr.types import TaskRecord, VerifyResult

log = logging.getLogger(__name__)

_COUNTERS = ("calls", "errors", "timeouts", "crashes", "in_process", "restarts")


def _failure(kind: str, reason: str) -> VerifyResult:
    """Reward 0 for a verifier that failed; `meta['verifier_failure']` says how (error, timeout, crash)."""
    return VerifyResult(0.0, False, reason, None, {"verifier_failure": kind})


def _error_reason(err: BaseException) -> str:
    return f"verifier error: {type(err).__name__}: {err}"


def _die_with_parent(parent_pid: int) -> None:
    """End this worker when the trainer dies, even by SIGKILL: forked workers hold copies of each other's pipe
    ends, so end-of-file alone cannot tell them. Linux's PR_SET_PDEATHSIG does it at once; a watcher thread
    polling the parent pid covers other platforms."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(0)


def _worker_main(task: Any, conn: Any, parent_pid: int) -> None:
    """A worker's loop: receive (index, text, record), send (index, 'ok', result) or (index, 'error', why)."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    faulthandler.disable()  # a crash is reported by the pool as "verifier crashed (...)", not a stack dump
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, text, record = message
        try:
            reply: tuple[int, str, Any] = (index, "ok", task.verify(text, record))
        except BaseException as err:  # SystemExit and KeyboardInterrupt in a verifier are its bugs too
            reply = (index, "error", _error_reason(err))
        try:
            conn.send(reply)
        except Exception as err:  # the result could not be pickled
            conn.send((index, "error", f"verifier error: result not picklable: {type(err).__name__}: {err}"))


class _Worker:
    def __init__(self, ctx: Any, task: Any):
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(task, child, os.getpid()), name="rlvr-verifier",
                                   daemon=True)
        self.process.start()
        child.close()

    def kill(self) -> int | None:
        """SIGKILL the worker (no-op if it is gone) and return its exit code."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        code = self.process.exitcode
        self.conn.close()
        return code


class VerifierPool:
    """`task.verify` for many (text, record) pairs on `workers` forked processes, `timeout` seconds per call.

    `workers=0` runs every call in this process (no timeout protection), for debugging.
    """

    def __init__(self, task: Any, workers: int = 2, timeout: float = 10.0):
        if workers < 0:
            raise ValueError(f"VerifierPool: workers must be >= 0; got {workers}")
        if not timeout > 0:
            raise ValueError(f"VerifierPool: timeout must be > 0 seconds; got {timeout}")
        try:
            self._ctx = multiprocessing.get_context("fork")
        except ValueError:
            raise RuntimeError("VerifierPool needs the 'fork' start method, which this platform lacks; "
                               "use workers=0 to verify in-process") from None
        self.task = task
        self.workers = workers
        self.timeout = float(timeout)
        self._slots: list[_Worker | None] = [None] * workers
        self.reset_stats()

    # -- public API ------------------------------------------------------------------------------------------

    def map(self, pairs: Iterable[tuple[str, TaskRecord]]) -> list[VerifyResult]:
        """One VerifyResult per (text, record), in order. Never raises for what a verifier does."""
        pairs = list(pairs)
        start = time.monotonic()
        results: list[VerifyResult | None] = [None] * len(pairs)
        try:
            if self.workers == 0:
                for i, (text, record) in enumerate(pairs):
                    results[i] = self._verify_here(text, record, None)
            else:
                self._run(pairs, results)
        finally:
            self._stats["calls"] += sum(r is not None for r in results)
            self._stats["seconds"] += time.monotonic() - start
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def verify(self, text: str, record: TaskRecord) -> VerifyResult:
        return self.map([(text, record)])[0]

    def stats(self) -> dict[str, float]:
        """Counters since the last reset: calls, errors, timeouts, crashes, in_process (unpicklable records
        verified here), restarts (workers replaced), seconds (inside `map`) and calls_per_s."""
        out: dict[str, float] = dict(self._stats)
        out["calls_per_s"] = out["calls"] / out["seconds"] if out["seconds"] > 0 else 0.0
        return out

    def reset_stats(self) -> None:
        self._stats: dict[str, float] = {name: 0 for name in _COUNTERS}
        self._stats["seconds"] = 0.0

    def close(self) -> None:
        """Kill every worker. The pool stays usable: the next `map` starts fresh workers."""
        for i, worker in enumerate(self._slots):
            if worker is not None:
                worker.kill()
                self._slots[i] = None

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- internals -------------------------------------------------------------------------------------------

    def _worker(self, slot: int) -> _Worker:
        worker = self._slots[slot]
        if worker is None or not worker.process.is_alive():
            if worker is not None:
                worker.kill()
            worker = self._slots[slot] = _Worker(self._ctx, self.task)
        return worker

    def _replace(self, slot: int) -> int | None:
        """Kill the worker in `slot` (a fresh one starts on the next dispatch); its exit code."""
        worker = self._slots[slot]
        self._slots[slot] = None
        self._stats["restarts"] += 1
        return worker.kill() if worker is not None else None

    def _verify_here(self, text: str, record: TaskRecord, why: str | None) -> VerifyResult:
        if why is not None:
            self._stats["in_process"] += 1
        try:
            v = self.task.verify(text, record)
        except Exception as err:
            self._stats["errors"] += 1
            reason = _error_reason(err) + (f" [{why}; verified in-process]" if why else "")
            return _failure("error", reason)
        if why is None:
            return v
        return VerifyResult(v.reward, v.correct, f"{v.reason} [{why}; verified in-process]",
                            getattr(v, "extracted", None), dict(getattr(v, "meta", {}) or {}))

    def _run(self, pairs: list[tuple[str, TaskRecord]], results: list[VerifyResult | None]) -> None:
        pending = deque(range(len(pairs)))
        busy: dict[int, tuple[int, float]] = {}  # slot -> (index of the pair, deadline)
        while pending or busy:
            for slot in range(self.workers):
                while pending and slot not in busy:
                    index = pending.popleft()
                    text, record = pairs[index]
                    try:
                        payload = ForkingPickler.dumps((index, text, record))
                    except Exception as err:
                        why = f"record not picklable: {type(err).__name__}: {err}"
                        log.warning("verifier pool: %s", why)
                        results[index] = self._verify_here(text, record, why)
                        continue
                    worker = self._worker(slot)
                    try:
                        worker.conn.send_bytes(payload)
                    except OSError:  # it died while idle: replace it and try again
                        self._replace(slot)
                        pending.appendleft(index)
                        continue
                    busy[slot] = (index, time.monotonic() + self.timeout)
            if not busy:
                continue
            waiting: dict[Any, int] = {}
            for slot in busy:
                worker = self._slots[slot]
                assert worker is not None
                waiting[worker.conn] = slot
                waiting[worker.process.sentinel] = slot
            left = min(deadline for _, deadline in busy.values()) - time.monotonic()
            ready = set(wait(list(waiting), timeout=max(0.0, left)))
            now = time.monotonic()
            for slot, (index, deadline) in list(busy.items()):
                worker = self._slots[slot]
                assert worker is not None
                if worker.conn in ready:
                    try:
                        got, status, payload = worker.conn.recv()
                    except Exception:  # EOF or a torn message: it died mid-reply
                        results[index] = self._crashed(slot)
                    else:
                        if got != index:  # cannot happen with one call per worker at a time
                            results[index] = self._crashed(slot)
                        elif status == "ok":
                            results[index] = payload
                        else:
                            self._stats["errors"] += 1
                            results[index] = _failure("error", payload)
                elif worker.process.sentinel in ready:
                    results[index] = self._crashed(slot)
                elif now >= deadline:
                    self._stats["timeouts"] += 1
                    self._replace(slot)
                    log.warning("verifier pool: call %d timed out after %gs; worker replaced", index, self.timeout)
                    results[index] = _failure("timeout", f"verifier timeout after {self.timeout:g}s")
                else:
                    continue
                del busy[slot]

    def _crashed(self, slot: int) -> VerifyResult:
        self._stats["crashes"] += 1
        code = self._replace(slot)
        detail = f"exit code {code}"
        if code is not None and code < 0:
            try:
                detail += f", {signal.Signals(-code).name}"
            except ValueError:
                pass
        log.warning("verifier pool: worker crashed (%s); replaced", detail)
        return _failure("crash", f"verifier crashed ({detail})")
