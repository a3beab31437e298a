"""Running a multi-stage recipe (`rlvr.config.stages`): each stage is a normal run in `RUN/stages/<i>-<name>/`,
started from the previous stage's `final/`; `RUN/stages.json` lists every stage's directory, status and held-out
evaluation before and after.

Rerunning the same command continues: a stage whose run finished (`final/`, and `eval_after.json` when
eval.after is on) is skipped, a stage cut off mid-way resumes from its newest checkpoint as `rlvr train
--resume` would, and the stages after it run as usual.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from rlvr.config.stages import Stage, StagedRun
from rlvr.errors import ConfigError
from rlvr.parallel import data_parallel as dp
from rlvr.runtime import console
from rlvr.trainer.evaluation import eval_summary, saved_eval
from rlvr.trainer.loop import train
from rlvr.trainer.stopping import TrainingInterrupted

SUMMARY = "stages.json"


def stage_finished(stage: Stage) -> bool:
    """The stage's run completed: its final model is written and, if it evaluates after training, so is that."""
    run_dir = Path(stage.cfg.run.dir)  # type: ignore[arg-type]
    done = (run_dir / "final" / "config.json").is_file()
    return done and (not stage.cfg.eval.after or (run_dir / "eval_after.json").is_file())


def _stage_started(stage: Stage) -> bool:
    return (Path(stage.cfg.run.dir) / "config.yaml").is_file()  # type: ignore[arg-type]


def _entry(stage: Stage, status: str, error: str | None = None) -> dict[str, Any]:
    run_dir = Path(stage.cfg.run.dir)  # type: ignore[arg-type]
    entry: dict[str, Any] = {"index": stage.index, "name": stage.name, "run_dir": str(run_dir), "status": status,
                             "model_path": str(stage.cfg.model.path), "task": stage.cfg.task.name,
                             "steps": stage.cfg.train.steps}
    for tag in ("before", "after"):
        result = saved_eval(run_dir, tag)
        entry[f"eval_{tag}"] = eval_summary(result) if result is not None else None
    if error is not None:
        entry["error"] = error
    return entry


class _Summary:
    """RUN/stages.json, rewritten atomically after every change of a stage's status (rank 0 only)."""

    def __init__(self, staged: StagedRun):
        self.staged = staged
        self.path = staged.run_dir / SUMMARY
        self.entries = [_entry(s, "done" if stage_finished(s) else "started" if _stage_started(s) else "pending")
                        for s in staged.stages]

    def set(self, stage: Stage, status: str, error: str | None = None) -> None:
        self.entries[stage.index] = _entry(stage, status, error)
        self.write()

    def write(self) -> None:
        if not dp.is_main():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {"recipe": self.staged.source, "name": self.staged.name, "run_dir": str(self.staged.run_dir),
                "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "stages": self.entries}
        tmp = self.path.with_name(f".{SUMMARY}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(body, indent=2) + "\n")
        os.replace(tmp, self.path)


def _check_same_stages(staged: StagedRun) -> None:
    """A rerun continues the run in RUN only if RUN holds the same stages (names, in order)."""
    path = staged.run_dir / SUMMARY
    if not path.is_file():
        return
    try:
        before = [s["name"] for s in json.loads(path.read_text())["stages"]]
    except (OSError, ValueError, KeyError, TypeError):
        return  # unreadable: rewritten below
    now = [s.name for s in staged.stages]
    if before != now:
        raise ConfigError(f"run.dir: '{staged.run_dir}' holds a staged run with stages {before}, this recipe has "
                          f"{now}; choose another run.dir, or delete it to start over", staged.source)


def run_stages(staged: StagedRun, stop_after: int | None = None) -> Path:
    """Run every stage in order (skipping finished ones, resuming a cut-off one); returns RUN. `stop_after` is
    passed to each stage's run: a stage that stops early ends this invocation, to be continued by a rerun."""
    _check_same_stages(staged)
    summary = _Summary(staged)
    summary.write()
    for stage in staged.stages:
        if stage_finished(stage):
            console.print(escape(f"{stage.label}: finished earlier in {stage.cfg.run.dir}; skipped"))
            summary.set(stage, "done")
            continue
        if stage.chained and not Path(stage.cfg.model.path).is_dir():
            raise ConfigError(f"{stage.label}: model.path {stage.cfg.model.path} (the previous stage's final/) "
                              "is missing", staged.source)
        resume = _stage_started(stage)
        console.print(escape(f"{stage.label}: {'resuming' if resume else 'starting'} in {stage.cfg.run.dir} "
                             f"from {stage.cfg.model.path}"))
        summary.set(stage, "running")
        try:
            train(stage.cfg, resume=resume, stop_after=stop_after)
        except BaseException as err:  # interrupted or failed: say so in stages.json; a rerun continues it
            interrupted = isinstance(err, (KeyboardInterrupt, TrainingInterrupted))
            summary.set(stage, "interrupted" if interrupted else "failed", f"{type(err).__name__}: {err}")
            console.print(escape(f"{stage.label} {'interrupted' if interrupted else 'failed'}; to continue it and "
                                 "the stages after it, rerun the same command"), style="yellow")
            raise
        if not stage_finished(stage):  # stopped early on request (stop_after): a checkpoint to resume from
            summary.set(stage, "stopped")
            console.print(escape(f"{stage.label} stopped before its last step; rerun the same command to continue"))
            return staged.run_dir
        summary.set(stage, "done")
    console.print(escape(f"All {len(staged.stages)} stages done. Summary: {summary.path}"))
    return staged.run_dir
