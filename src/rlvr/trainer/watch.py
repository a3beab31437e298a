"""Signs of life and of trouble during a run, kept out of the loop's body.

- `Heartbeat`: off a terminal (a log file, CI, `make demo | tee`), the console otherwise prints one line per
  `logging.console_every` steps, and a slow machine shows nothing for minutes. The heartbeat prints a short
  line whenever `every_s` seconds of wall time passed without one, naming what is running (which step).
- `ZeroSpreadWatch`: when nearly every group has the same reward for all its samples, group-relative
  advantages are zero and nothing is learned. It warns once, naming the likely cause.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("rlvr.train")


class Heartbeat:
    """A daemon thread that prints `<what is running>, <seconds> s in it` after `every_s` seconds of silence.

    `doing(what)` names the current activity (and counts as a sign of life); `printed()` says the console just
    showed a line. Disabled (no thread) when `enabled` is false, e.g. when a live progress bar is on screen.
    """

    def __init__(self, enabled: bool, every_s: float = 15.0, emit: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.enabled, self.every_s, self.clock = enabled, every_s, clock
        self.emit = emit or _print
        self.what, self.since = "starting", clock()
        self.last = clock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="rlvr-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def doing(self, what: str) -> None:
        with self._lock:
            self.what, self.since = what, self.clock()

    def printed(self) -> None:
        with self._lock:
            self.last = self.clock()

    def beat(self) -> str | None:
        """Print a line if `every_s` passed since the last one; returns it (the thread calls this each second)."""
        with self._lock:
            now = self.clock()
            if now - self.last < self.every_s:
                return None
            self.last = now
            line = f"{self.what}: {now - self.since:.0f} s in it"
        self.emit(line)
        return line

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s)):
            self.beat()


def _print(line: str) -> None:
    from rich.markup import escape

    from rlvr.runtime import console

    console.print(f"[dim]{escape(line)}[/dim]", highlight=False)


class ZeroSpreadWatch:
    """Warns once when at least `frac` of the groups had zero reward spread for `patience` steps in a row."""

    def __init__(self, frac: float = 0.95, patience: int = 3, emit: Callable[[str], None] | None = None):
        self.frac, self.patience = frac, patience
        self.emit = emit or _warn
        self.streak = 0
        self.warned = False

    def observe(self, step: int, groups: Sequence[Any], chat: bool | None = None) -> str | None:
        """Count this step's groups; warn (once) and return the message when the streak reaches `patience`.
        `chat`: whether prompts went through a chat template (False adds a hint about system prompts)."""
        if not groups or self.warned:
            return None
        flat = sum(len({s.reward for s in g.samples if not s.excluded}) <= 1 for g in groups) / len(groups)
        self.streak = self.streak + 1 if flat >= self.frac else 0
        if self.streak < self.patience:
            return None
        self.warned = True
        rewards = Counter(round(s.reward, 6) for g in groups for s in g.samples if not s.excluded) or Counter([0.0])
        reasons = Counter(str(r) for g in groups for s in g.samples
                          for r in (s.meta.get("reasons") or {}).values() if r)
        common = ", ".join(f"'{r}' ({n})" for r, n in reasons.most_common(2))
        value = rewards.most_common(1)[0][0]
        message = (f"{100 * flat:.0f}% of groups had the same reward for every sample for {self.streak} steps in a "
                   f"row (step {step}; most common reward {value:g}): their advantages are zero, so the policy "
                   "barely learns. ")
        if value <= 0:
            message += ("Likely cause: no sample is ever right, e.g. the answer format the verifier expects is not "
                        "in the prompt, or the task is too hard for this model")
            if chat is False:
                message += " (this model has no chat template, so a task's system prompt is not used)"
        else:
            message += "Likely cause: the task is too easy for this model (every sample is right)"
        message += (f". Verifier reasons: {common}." if common else ".") + \
            " Check rollouts.jsonl; try a larger rollout.n, an easier task, or a format reward."
        self.emit(message)
        return message


def _warn(message: str) -> None:
    from rich.markup import escape

    from rlvr.runtime import console

    log.warning("%s", message)
    console.print(f"[yellow]warning: {escape(message)}[/yellow]", highlight=False)
