"""The sampling stage: which prompts go into a step's batch, how many samples each gets, and which groups
reach the learner.

A batch sampler is a registered class built with the prompt split (`prompts`) and the run's seed; its
keyword-only parameters are its config knobs (`sampling: {name: ..., ...}`). Each step the trainer calls
`next_batch(ctx)`, where `ctx.rollout(records, n)` samples n responses per record (and scores them), so a
sampler can ask for more samples, more prompts, or drop groups, within the budget it is given. It returns the
groups to train on and its own metrics (groups kept and dropped, samples spent per useful group, ...).
Its `state_dict` goes into checkpoints, so resume continues exactly.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.registry import Registry
from rlvr.sampling.order import PromptSampler
from rlvr.types import Group, TaskRecord

SAMPLERS: Registry = Registry("batch sampler")


@dataclass
class StepContext:
    """What a batch sampler may use in one step."""

    step: int
    prompts_per_step: int  # groups the learner expects
    n: int  # samples per prompt (rollout.n)
    rollout: Callable[[Sequence[TaskRecord], int], list[Group]]  # sample n responses per record, rewarded
    score: Callable[[list[Group]], None] | None = None  # reward groups built by the sampler itself
    task: Any = None
    engine: Any = None  # the rollout engine (for samplers that branch or continue responses)
    renderer: Any = None  # record -> prompt ids
    params: Any = None  # the run's SamplingParams
    policy: Any = None
    tokenizer: Any = None
    total_steps: int = 0
    extras: dict[str, Any] = field(default_factory=dict)


class BatchSampler(abc.ABC):
    def __init__(self, prompts: Sequence[TaskRecord], seed: int = 0):
        self.prompts = prompts
        self.order = PromptSampler(len(prompts), seed=seed)

    def take(self, k: int) -> list[TaskRecord]:
        """The next k prompts in the seeded epoch order."""
        return [self.prompts[i] for i in self.order.next(k)]

    @abc.abstractmethod
    def next_batch(self, ctx: StepContext) -> tuple[list[Group], dict[str, float]]:
        """The step's rewarded groups for the learner, and this sampler's metrics."""

    def state_dict(self) -> dict[str, Any]:
        return {"order": self.order.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order.load_state_dict(state["order"] if "order" in state else state)


@SAMPLERS.register("uniform")
class UniformSampler(BatchSampler):
    """Every prompt in turn (a seeded permutation per epoch), `rollout.n` samples each, every group kept."""

    def next_batch(self, ctx: StepContext) -> tuple[list[Group], dict[str, float]]:
        return ctx.rollout(self.take(ctx.prompts_per_step), ctx.n), {}
