"""The RL controller. Read top to bottom, it is the algorithm:

    for each step:
        groups  = batches.next(step)              rollout: the sampler picks prompts, the generator samples n
                                                  answers each (behaviour log-probs), the scorer rewards them
        stats   = trainable.learn(groups)         advantages (e.g. GRPO group normalization), then the update
                  (+ reward_learner.learn(pairs)  co_evolve: the reward model, on the step's correct/incorrect pairs)
        publish(step)                             sync: the generator now samples from the new policy
        log(metrics); checkpoint when due; stop when a stop condition holds

The roles (generator, scorer, trainable, reference) are placed once by `rlvr.roles.place_roles`, here or on Ray;
this module never asks where they run. Set-up checks are in `preflight`, run state in `run`, metrics in
`metrics`, stop rules in `stopping`, and asynchronous batches in `async_loop`.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from rlvr import faults
from rlvr.config import Config
from rlvr.errors import RoleLost
from rlvr.eval.report import write_report
from rlvr.learner.reward_model import mine_group_pairs
from rlvr.models.lora import exportable
from rlvr.parallel import data_parallel as dp
from rlvr.runtime import (
    ProgressReporter,
    StopSignals,
    announce_sandbox,
    apply_threads,
    attach_log_file,
    console,
    prepare_run_dir,
    reuse_freed_memory,
    step_seed,
)
from rlvr.tracking import RolloutWriter, build_sinks
from rlvr.trainer.batches import batch_source
from rlvr.trainer.checkpoint import latest_checkpoint, save_hf_dir
from rlvr.trainer.evaluation import eval_summary, print_before_after, saved_eval
from rlvr.trainer.metrics import StepLog, step_metrics
from rlvr.trainer.preflight import preflight
from rlvr.trainer.run import Run, open_run
from rlvr.trainer.stopping import StopConditions, TrainingError, TrainingInterrupted  # noqa: F401 (API)
from rlvr.trainer.watch import Heartbeat, ZeroSpreadWatch

__all__ = ["TrainingError", "TrainingInterrupted", "train"]

def train(cfg: Config, *, resume: bool = False, stop_after: int | None = None) -> Path:
    """Run (or resume) RL training; returns the run directory. `stop_after` ends this invocation after that many
    steps in total, as if interrupted (tests use it)."""
    apply_threads(cfg.run.threads)  # run.threads: before any work, and before versions.json records it
    reuse_freed_memory(cfg.run.reuse_memory)  # before the model's tensors are allocated
    multi_rank = dp.init_from_env()  # torchrun: a data-parallel learner over the ranks
    task, tokenizer, device = preflight(cfg, multi_rank)  # bad input fails before any run directory exists
    run_dir = prepare_run_dir(cfg, resume) if dp.is_main() else None
    cfg.run.dir = run_dir = Path(dp.broadcast_object(str(run_dir) if run_dir else None))
    log_handler = attach_log_file(run_dir) if dp.is_main() else None
    try:
        if dp.is_main():
            announce_sandbox(cfg)
        run = open_run(cfg, run_dir, resume, task, tokenizer, device)
        try:
            return _run(run, resume, stop_after)
        finally:
            run.roles.close()
    finally:
        if log_handler is not None:
            logging.getLogger("rlvr").removeHandler(log_handler)
            log_handler.close()


def _run(run: Run, resume: bool, stop_after: int | None) -> Path:
    cfg, main, resumed = run.cfg, dp.is_main(), run.start_step if resume else None
    sink = build_sinks(cfg.logging.sinks if main else [], run.run_dir, cfg.model_dump(mode="json"),
                       resume_from_step=resumed, enabled=main)
    rollouts = RolloutWriter(run.run_dir, cfg.logging.rollouts_every if main else 0, cfg.logging.rollouts_per_step,
                             resume_from_step=resumed)
    try:  # off a terminal there is no live progress bar: a heartbeat line at least every 15 s says what runs
        with StopSignals() as signals, Heartbeat(main and not console.is_terminal) as heartbeat:
            return _loop(run, sink, rollouts, StopConditions(cfg, stop_after, signals), heartbeat)
    except RoleLost as err:  # e.g. a Ray learner rank died: continue from the newest checkpoint
        raise TrainingError(f"{err}. Newest complete checkpoint: {latest_checkpoint(run.run_dir) or 'none'}; "
                            f"continue with: rlvr train --resume {run.run_dir}") from None
    finally:
        sink.close()


def _loop(run: Run, sink: Any, rollouts: RolloutWriter, stop: StopConditions, heartbeat: Heartbeat) -> Path:
    cfg = run.cfg
    fresh_before = cfg.eval.before and run.start_step == 0
    heartbeat.doing("evaluating the starting model (eval.before)" if fresh_before else "starting")
    before = run.evaluate("before") if fresh_before else saved_eval(run.run_dir, "before")
    batches = batch_source(run)
    with ProgressReporter("train", cfg.train.steps, cfg.logging.progress and dp.is_main(),
                          completed=run.start_step) as progress:
        out = StepLog(sink, rollouts, progress, heartbeat, ZeroSpreadWatch(), cfg.logging.console_every,
                      dp.is_main(), run.renderer.uses_chat)
        for step in range(run.start_step + 1, stop.last_step + 1):
            heartbeat.doing(f"train step {step}/{cfg.train.steps} running")
            groups, metrics = train_step(run, batches, step, stop)  # rollout -> score -> learn -> publish
            if cfg.eval.every and step % cfg.eval.every == 0 and step < cfg.train.steps:
                metrics.update({f"eval/{k}": v for k, v in eval_summary(run.evaluate(f"step_{step:06d}")).items()})
            out.write(step, groups, metrics)                        # sinks, rollouts.jsonl, console
            if stop.after_step(step, run):                          # checkpoint; faults, signals, budgets
                break
    if stop.stopped_early():  # on request: leave a checkpoint to resume from
        if not (cfg.checkpoint.every and stop.last_step % cfg.checkpoint.every == 0):
            run.checkpoint(stop.last_step)
        return run.run_dir
    return _finish(run, before, heartbeat)


def train_step(run: Run, batches: Any, step: int, stop: StopConditions) -> tuple[list[Any], dict[str, float]]:
    """One step: rollout and score, advantages and update, weight sync; returns the groups and the metrics."""
    roles, started = run.roles, time.perf_counter()
    run.step = step
    groups, sampling = batches.next(step, stop.last_step)   # rollout + scores (the sampler's choice of prompts)
    rollout_s = time.perf_counter() - started
    faults.kill_point("rollout", step)
    roles.generator.sleep()                                  # a colocated engine frees memory for the learner
    learn_started = time.perf_counter()
    learned = roles.trainable.learn(groups)                  # advantages, then the policy update
    if roles.reward_learner is not None:                    # co_evolve: the reward model learns from this step
        learned = {**learned, **refresh_reward_model(roles.reward_learner, groups, step, run.cfg)}
    train_s = time.perf_counter() - learn_started
    if run.cfg.algorithm.reference_reset_every and step % run.cfg.algorithm.reference_reset_every == 0:
        roles.trainable.reset_reference()                    # ProRL: the reference moves to the policy
    roles.publish(step)                                      # the generator samples from the new policy
    metrics = step_metrics(groups, roles.scorer, learned, sampling, roles.generator.metrics(),
                           agent=run.cfg.agent is not None, rollout_s=rollout_s, train_s=train_s,
                           step_s=time.perf_counter() - started)
    spent = sampling.get("tokens_generated", metrics["response_tokens"])  # kept or dropped by the sampler
    metrics = dp.mean_metrics(metrics)                       # over data-parallel ranks (one rank: unchanged)
    run.tokens_spent += int(dp.sum_floats(spent)[0])
    metrics["rollout_tokens_total"] = float(run.tokens_spent)
    if run.renderer.multimodal:  # prompts left out because an image did not decode, so far
        metrics["images_skipped_total"] = float(len(run.renderer.skipped_images))
    stop.budget_reached(run.tokens_spent)
    run.faults = run.faults + 1 if math.isnan(learned["grad_norm"]) else 0  # every optimizer step skipped
    return groups, metrics


def refresh_reward_model(reward_learner: Any, groups: list[Any], step: int, cfg: Config) -> dict[str, float]:
    """co_evolve: every `coevolve.every` steps the reward model trains on this step's fresh (correct,
    incorrect) pairs, mined with the verifier's labels; returns its `rm/` metrics (none on other steps)."""
    co = cfg.coevolve
    assert co is not None
    if step % co.every:
        return {}
    pairs = mine_group_pairs(groups, co.max_pairs_per_prompt, step_seed(cfg.run.seed, step))
    return reward_learner.learn(pairs)


def _finish(run: Run, before: dict[str, Any] | None, heartbeat: Heartbeat) -> Path:
    """The trained policy as a HF directory in final/, the held-out evaluation after training and the report."""
    if dp.is_main():
        save_hf_dir(exportable(run.policy), run.saver, run.run_dir / "final")
        if run.roles.reward_learner is not None:  # co_evolve: the reward model, loadable by the reward_model scorer
            save_hf_dir(run.roles.reward_learner.hf_model(), run.saver, run.run_dir / "final_rm")
    dp.barrier()
    heartbeat.doing("evaluating the trained model (eval.after)" if run.cfg.eval.after else "finishing")
    after = run.evaluate("after") if run.cfg.eval.after else None
    if not dp.is_main():
        return run.run_dir
    if before is not None and after is not None:
        print_before_after(before, after, run.cfg.eval.ks)
    write_report(run.run_dir)
    console.print(f"Done. Run directory: [bold]{escape(str(run.run_dir))}[/bold]  "
                  + escape(f"(final model: {run.run_dir / 'final'}, report: {run.run_dir / 'report.html'})"))
    return run.run_dir
