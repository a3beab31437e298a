"""Where each step's scored groups come from. `SyncBatches` samples them when the step asks; the asynchronous
pipeline (`async_loop.AsyncBatches`) has them in flight ahead of time. Both return (groups, sampler metrics)."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.parallel import data_parallel as dp
from rlvr.runtime import step_seed
from rlvr.sampling import StepContext
from rlvr.types import Group


class SyncBatches:
    """Each step's batch, produced when it is needed by the configured batch sampler."""

    def __init__(self, run: Any):
        self.run = run

    def next(self, step: int, last_step: int) -> tuple[list[Group], dict[str, float]]:
        run, cfg = self.run, self.run.cfg
        if dp.world_size() > 1:  # every rank draws the same prompts and keeps every N-th one
            records = run.sampler.take(cfg.train.prompts_per_step)[dp.rank()::dp.world_size()]
            torch.manual_seed(step_seed(cfg.run.seed, step) + 7919 * dp.rank())
            return run.rollout(records, cfg.rollout.n), {}
        torch.manual_seed(step_seed(cfg.run.seed, step))
        ctx = StepContext(step=step, prompts_per_step=cfg.train.prompts_per_step, n=cfg.rollout.n,
                          rollout=run.rollout, score=lambda gs: run.reward_fn(gs, run.task), task=run.task,
                          engine=run.engine, renderer=run.renderer, params=run.params, policy=run.policy,
                          tokenizer=run.tokenizer, total_steps=cfg.train.steps,
                          extras={"teacher_rollout": run.teacher_rollout} if run.roles.teacher_generator else {})
        return run.sampler.next_batch(ctx)


def batch_source(run: Any) -> Any:
    """The asynchronous pipeline when `distributed.mode=async`, else batches sampled step by step."""
    if run.cfg.distributed.mode == "async":
        from rlvr.trainer.async_loop import AsyncBatches

        return AsyncBatches(run)
    return SyncBatches(run)
