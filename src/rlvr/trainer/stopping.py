"""When a run stops: after the last step, at a token budget or wall-clock limit, on SIGINT/SIGTERM, or after too
many consecutive faulty steps. Every decision is agreed over data-parallel ranks, so all ranks stop together."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from rlvr.config import Config
from rlvr.parallel import data_parallel as dp
from rlvr.runtime import StopSignals, console


class TrainingError(RuntimeError):
    """The run cannot continue (e.g. repeated non-finite steps). A valid checkpoint has been written."""


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM stopped the run after a checkpoint; `exit_code` is 128 + the signal number."""

    def __init__(self, signum: int, step: int, run_dir: Path):
        self.exit_code = 128 + signum
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name} after step {step} (checkpoint written). Continue with: "
                         f"rlvr train --resume {run_dir}")


class StopConditions:
    """The run's stop rules (train.steps, rollout_token_budget, max_time_s, max_fault_steps, signals)."""

    def __init__(self, cfg: Config, stop_after: int | None, signals: StopSignals):
        train = cfg.train
        self.steps, self.token_budget, self.max_time_s = train.steps, train.rollout_token_budget, train.max_time_s
        self.max_fault_steps, self.checkpoint_every = train.max_fault_steps, cfg.checkpoint.every
        # `stop_after` ends this invocation early, as if interrupted (tests and `--stop-after` use it)
        self.last_step = train.steps if stop_after is None else min(train.steps, stop_after)
        self.signals = signals
        self.started = time.perf_counter()
        self.budget_why: str | None = None  # set once a budget is reached: the run ends after this step

    def budget_reached(self, tokens_spent: int) -> bool:
        """Whether the token budget or the wall-clock limit is reached (any rank out of time stops all)."""
        out_of_time = self.max_time_s is not None and \
            dp.sum_floats(float(time.perf_counter() - self.started >= self.max_time_s))[0] > 0
        if out_of_time:
            self.budget_why = f"train.max_time_s={self.max_time_s}"
        elif self.token_budget is not None and tokens_spent >= self.token_budget:
            self.budget_why = f"train.rollout_token_budget={self.token_budget}"
        return self.budget_why is not None

    def too_many_faults(self, faults: int) -> bool:
        """Whether `faults` consecutive steps skipped every optimizer step: the run stops with `fault_error`."""
        return faults >= self.max_fault_steps

    @staticmethod
    def fault_error(faults: int, checkpoint: Path) -> TrainingError:
        return TrainingError(f"{faults} consecutive steps had a non-finite loss or gradient and were skipped; "
                             f"stopping. Checkpoint: {checkpoint}. Lower optim.lr or check the rewards for NaN")

    def checkpoint_due(self, step: int) -> bool:
        return bool(self.checkpoint_every and step % self.checkpoint_every == 0) or step == self.steps \
            or self.budget_why is not None

    def signalled(self) -> int | None:
        """The signal that asks the run to stop, if any rank received one (then every rank stops)."""
        if dp.sum_floats(float(self.signals.received is not None))[0] == 0:
            return None
        if self.signals.received is None:
            self.signals.received = signal.SIGTERM
        return self.signals.received

    def after_step(self, step: int, run: Any) -> bool:
        """Apply the rules after a logged step: stop with an error after too many faulty steps, checkpoint when
        due, stop on a signal (after a checkpoint). Returns True when a budget ends the run after this step."""
        if self.too_many_faults(run.faults):
            raise self.fault_error(run.faults, run.checkpoint(step))
        saved = self.checkpoint_due(step)
        if saved:
            run.checkpoint(step)
        signum = self.signalled()
        if signum is not None:
            if not saved:
                run.checkpoint(step)
            raise TrainingInterrupted(signum, step, run.run_dir)
        if self.budget_why is not None:
            console.print(escape(f"Budget reached at step {step} ({self.budget_why}): {run.tokens_spent} tokens "
                                 "sampled"))
        return self.budget_why is not None

    def stopped_early(self) -> bool:
        """This invocation ends before train.steps on request (`stop_after`), not on a budget."""
        return self.last_step < self.steps and self.budget_why is None
