"""Shared pieces of the batch samplers: what makes a group useful, counting what a step generated, and the
metrics every sampler reports.

A group is *useful* when its rewards are not all equal: only then does a group-relative advantage (GRPO,
RLOO, ...) give it a non-zero gradient. Every sampler reports, through the dict `next_batch` returns (the
trainer logs it under `sampling/`):

    groups_kept          groups handed to the learner
    groups_dropped       groups generated this step and not trained on
    useful_groups        kept groups whose rewards are not all equal
    samples_generated    responses generated this step (kept or not)
    tokens_generated     response tokens generated this step (kept or not); the trainer's own
                         `response_tokens` counts only the kept ones, so compare budgets with this
    samples_per_useful_group   samples_generated / max(useful_groups, 1)
    rounds               calls to the rollout engine this step
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from rlvr.types import Group, Sample, TaskRecord


def is_useful(group: Group) -> bool:
    """True when the group's rewards are not all equal (a group-relative advantage is non-zero somewhere).
    Excluded samples (a non-finite reward) do not count: the advantage leaves them out."""
    return len({float(s.reward) for s in group.samples if not s.excluded}) > 1


def pass_rate(group: Group) -> float:
    """The group's on-the-fly pass rate: the fraction of samples the verifier marked correct."""
    if not group.samples:
        return 0.0
    return sum(bool(s.correct) for s in group.samples) / len(group.samples)


def response_tokens(groups: Iterable[Group]) -> int:
    return sum(len(s.response_ids) for g in groups for s in g.samples)


def step_generator(seed: int, step: int, salt: int = 0) -> torch.Generator:
    """A generator seeded by (run seed, step, salt): random choices are reproducible and resume-exact without
    storing generator state."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step) * 7_919 + salt)


class RolloutMeter:
    """Wraps `ctx.rollout`, counting the samples and response tokens generated and the engine calls made."""

    def __init__(self, rollout: Callable[[Sequence[TaskRecord], int], list[Group]]):
        self._rollout = rollout
        self.samples = 0
        self.tokens = 0
        self.calls = 0

    def __call__(self, records: Sequence[TaskRecord], n: int) -> list[Group]:
        groups = self._rollout(records, n)
        self.add(s for g in groups for s in g.samples)
        self.calls += 1
        return groups

    def add(self, samples: Iterable[Sample], calls: int = 0) -> None:
        """Count samples generated outside `ctx.rollout` (e.g. branches of a tree rollout)."""
        for s in samples:
            self.samples += 1
            self.tokens += len(s.response_ids)
        self.calls += calls


def sampling_metrics(kept: Sequence[Group], dropped_count: int, meter: RolloutMeter,
                     **extra: float) -> dict[str, float]:
    """The standard sampler metrics (see the module docstring) plus `extra`."""
    useful = sum(is_useful(g) for g in kept)
    metrics = {
        "groups_kept": float(len(kept)),
        "groups_dropped": float(dropped_count),
        "useful_groups": float(useful),
        "samples_generated": float(meter.samples),
        "tokens_generated": float(meter.tokens),
        "samples_per_useful_group": meter.samples / max(useful, 1),
        "rounds": float(meter.calls),
    }
    metrics.update({k: float(v) for k, v in extra.items()})
    return metrics


def sample_stats(values: Sequence[float]) -> tuple[float, float]:
    """Mean and unbiased standard deviation (0 for fewer than two values)."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def regroup(group: Group, samples: list[Sample]) -> Group:
    """A group of the same prompt holding `samples`."""
    return Group(record=group.record, prompt_ids=group.prompt_ids, samples=samples, prompt_text=group.prompt_text)


def index_split(prompts: Sequence[TaskRecord], key: Callable[[TaskRecord], Any], limit: int | None,
                seed: int) -> dict[Any, list[int]]:
    """Prompt indices by `key(record)`, over the first `limit` prompts of a seeded permutation of the split
    (all of it when `limit` is None or larger): how samplers that choose by source or difficulty see a large
    (lazily generated) split without building every record."""
    size = len(prompts)
    if limit is None or limit >= size:
        order = list(range(size))
    else:
        order = torch.randperm(size, generator=torch.Generator().manual_seed(seed * 31 + 7))[:limit].tolist()
        order.sort()
    buckets: dict[Any, list[int]] = {}
    for i in order:
        buckets.setdefault(key(prompts[i]), []).append(i)
    return buckets
