"""The optimisation loop shared by the reward models rlvr trains on their own (`rlvr rm`, `rlvr prm` and its
OREAL token-level mode): seeded shuffled batches, AdamW with the configured schedule, gradient clipping, a step
skipped when the loss or the gradient norm is not finite, held-out evaluation every `train.eval_every` steps and
at the end, metrics.jsonl, progress and checkpoints. What differs between the models (their data, loss and
evaluation) comes in as two callables."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.learner.optim import build_optimizer, build_scheduler
from rlvr.rm.data import ShuffledBatches
from rlvr.runtime import ProgressReporter, format_metrics
from rlvr.tracking import JsonlSink
from rlvr.trainer.checkpoint import save_checkpoint


def fit_reward_model(model: torch.nn.Module, tokenizer: Any, cfg: Any, run_dir: Path, *, name: str, examples: int,
                     accumulate: Callable[[list[int]], tuple[float, dict[str, float]]],
                     evaluate: Callable[[], dict[str, float]], shown: Sequence[str]) -> tuple[dict, dict]:
    """Train `model` for `cfg.train.steps` steps of `cfg.train.batch_size` of the `examples` training examples.
    `accumulate(picked)` runs the forward and backward passes of the picked example indices (its loss already the
    batch mean) and returns (loss, extra training metrics); `evaluate()` scores the held-out set. Returns the
    held-out metrics (before, after); `shown` names the metrics on the console line."""
    sink = JsonlSink(run_dir / "metrics.jsonl")
    before = evaluate()
    sink.log(0, {f"eval/{k}": v for k, v in before.items()})
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, cfg.train.steps)
    batches = ShuffledBatches(examples, cfg.train.batch_size, cfg.run.seed)
    max_norm = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else float("inf")
    latest = before
    try:
        with ProgressReporter(name, cfg.train.steps, cfg.logging.progress) as progress:
            for step in range(1, cfg.train.steps + 1):
                started = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                loss_value, extra = accumulate(batches.next())
                grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
                if math.isfinite(loss_value) and math.isfinite(grad_norm):
                    optimizer.step()
                    scheduler.step()
                metrics = {"loss": loss_value, **extra, "grad_norm": grad_norm, "lr": scheduler.get_last_lr()[0],
                           "step_s": time.perf_counter() - started}
                if (cfg.train.eval_every and step % cfg.train.eval_every == 0) or step == cfg.train.steps:
                    latest = evaluate()
                    metrics.update({f"eval/{k}": v for k, v in latest.items()})
                sink.log(step, metrics)
                progress.update(step, format_metrics(metrics, shown),
                                print_line=step % cfg.logging.console_every == 0)
                if cfg.checkpoint.every and step % cfg.checkpoint.every == 0 and step < cfg.train.steps:
                    save_checkpoint(run_dir, step, model, tokenizer, {"optimizer": optimizer.state_dict()},
                                    cfg.checkpoint.keep_last)
    finally:
        sink.close()
    return before, latest
