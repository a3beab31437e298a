"""The numbers one training step logs: rollout statistics, the learner's, the sampler's and the timings."""

from __future__ import annotations

import logging
from typing import Any

import torch

from rlvr.rewards import RewardFunction, non_finite_metrics
from rlvr.rollout import agent_metrics
from rlvr.runtime import format_metrics
from rlvr.types import Group

CONSOLE_KEYS = ("reward", "acc", "len", "entropy", "kl", "clip", "step_s")
log = logging.getLogger("rlvr.train")


def rollout_metrics(groups: list[Group], reward_fn: RewardFunction) -> dict[str, float]:
    """The step's rollout and reward statistics. Excluded samples (a reward that was not a finite number, scored
    0 and trained on nowhere) are left out of every statistic, as they are of their groups' advantages: a group
    counts as zero-spread (`zero_std_frac`) when its valid samples have fewer than two distinct rewards. They are
    counted in `reward_non_finite(_frac)`, and their tokens in `response_tokens` (generated: work done). With no
    valid sample at all the statistics are 0."""
    all_samples = [s for g in groups for s in g.samples]
    samples = [s for s in all_samples if not s.excluded]
    n = len(samples)
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float64)
    lengths = torch.tensor([len(s.response_ids) for s in samples], dtype=torch.float64)
    metrics: dict[str, float] = {
        "reward_mean": float(rewards.mean()) if n else 0.0,
        "reward_std": float(rewards.std()) if n > 1 else 0.0,
        "accuracy": sum(bool(s.correct) for s in samples) / max(n, 1),
        "response_length_mean": float(lengths.mean()) if n else 0.0,
        "response_length_max": float(lengths.max()) if n else 0.0,
        "truncated_frac": sum(s.truncated for s in samples) / max(n, 1),
        "zero_std_frac": sum(len({s.reward for s in g.samples if not s.excluded}) <= 1 for g in groups)
        / max(len(groups), 1),
        "response_tokens": float(sum(len(s.response_ids) for s in all_samples)),
    }
    for label, flag in (("correct", True), ("wrong", False)):  # the lab's length findings (Dr.GRPO)
        picked = [len(s.response_ids) for s in samples if bool(s.correct) == flag]
        if picked:
            metrics[f"response_length_{label}_mean"] = sum(picked) / len(picked)
    for name, _, _ in reward_fn.components:
        metrics[f"reward/{name}"] = sum(s.rewards.get(name, 0.0) for s in samples) / max(n, 1)
    metrics.update(reward_fn.last_metrics)
    metrics.update(non_finite_metrics(groups))  # samples scored 0 and excluded this step
    for reason, count in sorted(reward_fn.failures.items()):
        metrics[f"reward_failures/{reason}"] = float(count)
    return metrics


def step_metrics(groups: list[Group], scorer: RewardFunction, learned: dict[str, float],
                 sampling: dict[str, float], placement: dict[str, float], *, agent: bool, rollout_s: float,
                 train_s: float, step_s: float) -> dict[str, float]:
    """One step's metrics on this rank: rollout and reward statistics, the update's, the sampler's (under
    `sampling/`, or `async/` from the asynchronous pipeline), the placement's, and the timings."""
    metrics = {**rollout_metrics(groups, scorer), **learned,
               **{k if k.startswith("async/") else f"sampling/{k}": v for k, v in sampling.items()}}
    if agent:
        metrics.update(agent_metrics(groups))
    metrics.update(placement)
    metrics.update(rollout_s=rollout_s, train_s=train_s, step_s=step_s,
                   rollout_tokens_per_s=metrics["response_tokens"] / max(rollout_s, 1e-9),
                   train_tokens_per_s=learned["train_tokens"] / max(train_s, 1e-9))
    return metrics


def console_summary(metrics: dict[str, float]) -> dict[str, Any]:
    """The few numbers the console line shows (CONSOLE_KEYS)."""
    return {"reward": metrics["reward_mean"], "acc": metrics["accuracy"], "len": metrics["response_length_mean"],
            "entropy": metrics.get("entropy"), "kl": metrics.get("kl"), "clip": metrics.get("clip_frac"),
            "step_s": metrics["step_s"]}


class StepLog:
    """Where a step's results go: metrics.jsonl and the other sinks, rollouts.jsonl, the console line (progress
    bar or plain lines) and train.log; and the zero-spread watch on the groups."""

    def __init__(self, sink: Any, rollouts: Any, progress: Any, heartbeat: Any, spread: Any, console_every: int,
                 main: bool, chat: bool):
        self.sink, self.rollouts, self.progress, self.heartbeat, self.spread = sink, rollouts, progress, heartbeat, spread
        self.console_every, self.main, self.chat = console_every, main, chat

    def write(self, step: int, groups: list[Group], metrics: dict[str, float]) -> None:
        self.rollouts.write(step, groups)
        self.sink.log(step, metrics)
        line = format_metrics(console_summary(metrics), CONSOLE_KEYS)
        self.progress.update(step, line, print_line=step % self.console_every == 0)
        if step % self.console_every == 0:
            self.heartbeat.printed()
        log.info("step %d %s", step, line)
        if self.main:
            self.spread.observe(step, groups, chat=self.chat)
