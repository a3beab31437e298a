"""Deterministic fault injection, for the reliability tests (and for anyone who wants to see a failure handled).

Set `RLVR_FAULTS` to a comma-separated list of `action:point:steps`:

    RLVR_FAULTS="kill:checkpoint:3"       SIGKILL this process while step 3's checkpoint is half written
    RLVR_FAULTS="kill:rollout:2"          SIGKILL right after step 2's rollout
    RLVR_FAULTS="kill:optimizer:2"        SIGKILL between step 2's backward pass and its optimizer step
    RLVR_FAULTS="nan:loss:2-4"            make the loss of steps 2..4 NaN
    RLVR_FAULTS="kill:worker:3"           kill rollout worker 0 (a Ray actor) at the 3rd generation request
    RLVR_FAULTS="kill:learner:2"          kill the last learner worker (a Ray actor) at the 2nd update
    RLVR_FAULTS="kill:reward_model:3"     kill co_evolve's reward model worker (a Ray actor) at its 3rd refresh
    RLVR_FAULTS="pause:worker:2"          at the 2nd generation request, create $RLVR_FAULT_DIR/paused-worker-2
                                          and wait until $RLVR_FAULT_DIR/resume-worker-2 exists (a test does
                                          something to the cluster meanwhile, e.g. kills a node)

Unset (the normal case), every check is a dictionary lookup that finds nothing.
"""

from __future__ import annotations

import os
import signal
import time
from functools import lru_cache
from pathlib import Path

ACTIONS = ("kill", "nan", "pause")
PAUSE_LIMIT_S = 600.0  # a pause the test forgot to end ends by itself
POINTS = ("rollout", "optimizer", "checkpoint", "loss", "worker", "learner", "reward_model")


@lru_cache(maxsize=4)
def _parse(spec: str) -> dict[tuple[str, str], set[int]]:
    out: dict[tuple[str, str], set[int]] = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        try:
            action, point, steps = item.split(":")
            lo, _, hi = steps.partition("-")
            span = set(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ValueError(f"RLVR_FAULTS: expected action:point:step[-step], got {item!r}") from None
        if action not in ACTIONS or point not in POINTS:
            raise ValueError(f"RLVR_FAULTS: unknown {item!r}; actions {ACTIONS}, points {POINTS}")
        out.setdefault((action, point), set()).update(span)
    return out


def armed(action: str, point: str, step: int) -> bool:
    """Whether the fault `action:point:step` is armed (callers that act on it themselves)."""
    return _armed(action, point, step)


def _armed(action: str, point: str, step: int) -> bool:
    spec = os.environ.get("RLVR_FAULTS")
    return bool(spec) and step in _parse(spec).get((action, point), ())


def kill_point(point: str, step: int) -> None:
    """SIGKILL this process here if a `kill:<point>:<step>` fault is armed."""
    if _armed("kill", point, step):
        os.kill(os.getpid(), signal.SIGKILL)


def nan_loss(step: int) -> bool:
    """Whether step `step`'s loss should be made NaN."""
    return _armed("nan", "loss", step)


def pause_point(point: str, step: int) -> None:
    """If `pause:<point>:<step>` is armed: say so with a file in $RLVR_FAULT_DIR and wait for the go-ahead file."""
    if not _armed("pause", point, step):
        return
    where = Path(os.environ.get("RLVR_FAULT_DIR") or ".")
    (where / f"paused-{point}-{step}").touch()
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not (where / f"resume-{point}-{step}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
