"""VerifierPool: verifiers run in forked workers; errors, timeouts and crashes cost one call, not the run."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from rlvr.rewards.pool import VerifierPool
from rlvr.rewards.sandbox import run_python
from rlvr.tasks import build_task
from rlvr.tasks.base import VerifyResult
from rlvr.types import TaskRecord

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork workers, Linux /proc")

REC = TaskRecord(id="r", question="q")


class FakeTask:
    """verify() misbehaves on purpose for some texts."""

    def verify(self, text: str, record: TaskRecord) -> VerifyResult:
        if text == "raise":
            raise ValueError("bad input")
        if text == "hang":
            time.sleep(60)
        if text == "exit":
            os._exit(3)
        if text == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if text == "slow":
            time.sleep(0.3)
        if text == "pid":
            return VerifyResult(1.0, True, str(os.getpid()))
        return VerifyResult(1.0, True, f"ok {text} {record.id}")


def test_results_in_order_with_error_timeout_and_crash() -> None:
    texts = ["a", "raise", "hang", "b", "exit", "segv", "c"]
    with VerifierPool(FakeTask(), workers=2, timeout=1.0) as pool:
        t0 = time.monotonic()
        results = pool.map([(t, REC) for t in texts])
        assert time.monotonic() - t0 < 4
        reasons = [r.reason for r in results]
        assert reasons[0] == "ok a r" and reasons[3] == "ok b r" and reasons[6] == "ok c r"
        assert reasons[1] == "verifier error: ValueError: bad input"
        assert reasons[2] == "verifier timeout after 1s"
        assert reasons[4] == "verifier crashed (exit code 3)"
        assert reasons[5] == "verifier crashed (exit code -11, SIGSEGV)"
        for i in (1, 2, 4, 5):
            assert results[i].reward == 0.0 and results[i].correct is False
        assert [results[i].meta["verifier_failure"] for i in (1, 2, 4, 5)] == ["error", "timeout", "crash", "crash"]
        stats = pool.stats()
        assert (stats["calls"], stats["errors"], stats["timeouts"], stats["crashes"]) == (7, 1, 1, 2)
        assert stats["restarts"] == 3 and stats["seconds"] > 0 and stats["calls_per_s"] > 0
        # replaced workers serve later calls as before
        assert [r.reason for r in pool.map([("d", REC), ("e", REC)])] == ["ok d r", "ok e r"]
        pool.reset_stats()
        assert pool.stats()["calls"] == 0 and pool.stats()["calls_per_s"] == 0.0


def test_parallel_workers_halve_the_time() -> None:
    n, each = 4, 0.3
    with VerifierPool(FakeTask(), workers=2, timeout=5.0) as pool:
        pool.map([("warm", REC)] * 2)  # fork the workers outside the timing
        t0 = time.monotonic()
        results = pool.map([("slow", REC)] * n)
        elapsed = time.monotonic() - t0
    assert all(r.correct for r in results)
    assert elapsed < 0.8 * n * each, elapsed  # serial would be 1.2 s; two workers about 0.6 s


def test_unpicklable_record_is_verified_in_process() -> None:
    record = TaskRecord(id="u", question="q", meta={"fn": lambda: 1})
    with VerifierPool(FakeTask(), workers=1, timeout=5.0) as pool:
        (result,) = pool.map([("pid", record)])
        assert result.correct
        assert result.reason.startswith(str(os.getpid())) and "record not picklable" in result.reason
        assert pool.stats()["in_process"] == 1


def test_close_kills_workers_and_the_pool_restarts_lazily() -> None:
    pool = VerifierPool(FakeTask(), workers=2, timeout=5.0)
    first = {int(r.reason) for r in pool.map([("pid", REC)] * 4)}
    processes = [w.process for w in pool._slots if w is not None]
    assert processes and all(p.is_alive() for p in processes)
    pool.close()
    assert all(not p.is_alive() for p in processes)
    second = {int(r.reason) for r in pool.map([("pid", REC)] * 2)}
    assert os.getpid() not in second and not (first & second)
    pool.close()


def test_zero_workers_runs_in_process_and_catches_errors() -> None:
    pool = VerifierPool(FakeTask(), workers=0)
    results = pool.map([("pid", REC), ("raise", REC)])
    assert results[0].reason == str(os.getpid())
    assert results[1].reason == "verifier error: ValueError: bad input"
    assert pool.stats()["errors"] == 1
    with pytest.raises(ValueError, match="timeout"):
        VerifierPool(FakeTask(), timeout=0)


class SandboxSleeper:
    """A verifier whose sandboxed program outlives the pool's timeout."""

    def __init__(self, marker: str):
        self.marker = marker

    def verify(self, text: str, record: TaskRecord) -> VerifyResult:
        r = run_python("import time\ntime.sleep(30)", timeout=30, files={self.marker: ""})
        return VerifyResult(0.0, False, str(r.killed_reason))


def _sandboxes_with(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in os.listdir(f"/proc/{pid}/cwd"):
                found.append(pid)
        except OSError:
            pass
    return found


def test_killed_worker_leaves_no_sandbox_behind() -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    with VerifierPool(SandboxSleeper(marker), workers=1, timeout=1.0) as pool:
        (result,) = pool.map([("x", REC)])
    assert result.reason == "verifier timeout after 1s"
    deadline = time.monotonic() + 3
    while _sandboxes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _sandboxes_with(marker), "the sandbox outlived its killed worker"
    leftovers = [d for d in Path(os.environ.get("TMPDIR", "/tmp")).glob("rlvr-sandbox-*") if (d / marker).exists()]
    assert not leftovers


def test_code_task_through_the_pool() -> None:
    task = build_task("code", {"train_size": 10, "eval_size": 4, "seed": 3, "timeout": 5.0})
    records = list(task.heldout)
    right = [(f"```python\n{r.meta['solution']}```", r) for r in records]
    wrong = [("```python\ndef f(*args):\n    return None\n```", r) for r in records]
    with VerifierPool(task, workers=2, timeout=20.0) as pool:
        results = pool.map(right + wrong)
    assert [r.correct for r in results] == [True] * 4 + [False] * 4
    assert all(r.reward == 0.0 for r in results[4:])
