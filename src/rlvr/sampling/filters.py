"""Online filters: sample, keep only groups that carry signal, and sample more prompts until the batch is full.

    kept = []
    for round in 1..max_rounds:                      # each round: `round_prompts` fresh prompts, n samples each
        for group in rollout(next prompts, n):
            kept.append(group) if keep(group) else dropped.append(group)
        if len(kept) >= prompts_per_step: break
    batch = kept[:prompts_per_step]                  # surplus useful groups are dropped (they are on-policy
                                                     # only for this step)
    if too few: warn naming `sampling.max_rounds`; train on what was found, or on the dropped groups if none

`dynamic` keeps groups whose rewards are not all equal; `difficulty_filter` keeps groups whose pass rate lies
in [low, high].
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from pydantic import Field

from rlvr.sampling.base import SAMPLERS, BatchSampler, StepContext
from rlvr.sampling.common import RolloutMeter, is_useful, pass_rate, sampling_metrics
from rlvr.types import Group

log = logging.getLogger("rlvr.sampling")


class FilteringSampler(BatchSampler):
    """Sample rounds of fresh prompts and keep the groups `keep` accepts until the batch is full."""

    def __init__(self, prompts, seed: int = 0, *,
                 max_rounds: Annotated[int, Field(ge=1)] = 8,
                 round_prompts: Annotated[int, Field(ge=1)] | None = None,
                 fill_with_dropped: bool = False):
        super().__init__(prompts, seed)
        self.max_rounds = max_rounds
        self.round_prompts = round_prompts
        self.fill_with_dropped = fill_with_dropped

    def keep(self, group: Group) -> bool:
        raise NotImplementedError

    def next_batch(self, ctx: StepContext) -> tuple[list[Group], dict[str, float]]:
        target = ctx.prompts_per_step
        meter = RolloutMeter(ctx.rollout)
        kept: list[Group] = []
        dropped: list[Group] = []
        while len(kept) < target and meter.calls < self.max_rounds:
            for group in meter(self.take(self.round_prompts or target), ctx.n):
                (kept if self.keep(group) else dropped).append(group)
        surplus = kept[target:]
        batch = kept[:target]
        cap_hit = len(batch) < target
        if cap_hit:
            log.warning(
                "%s sampler: only %d of %d groups passed the filter after %d rounds (sampling.max_rounds=%d); "
                "training on %s. Raise sampling.max_rounds or sampling.round_prompts, or widen the filter",
                type(self).__name__, len(batch), target, meter.calls, self.max_rounds,
                "the dropped groups" if not batch else
                ("them, topped up with dropped groups" if self.fill_with_dropped else "those"))
            if not batch:
                batch, dropped = dropped[:target], dropped[target:]
            elif self.fill_with_dropped:
                need = target - len(batch)
                batch, dropped = batch + dropped[:need], dropped[need:]
        kept_ids = {id(g) for g in batch}
        dropped_count = len([g for g in dropped if id(g) not in kept_ids]) + len(surplus)
        return batch, sampling_metrics(batch, dropped_count, meter, groups_surplus=len(surplus),
                                       cap_hit=float(cap_hit), **self.extra_metrics(batch))

    def extra_metrics(self, batch: list[Group]) -> dict[str, float]:
        return {}


@SAMPLERS.register("dynamic")
class DynamicSampler(FilteringSampler):
    r"""DAPO's dynamic sampling: drop groups whose rewards are all equal and sample more prompts until
    `prompts_per_step` useful groups are collected.

        keep(g)  <=>  0 < #{distinct rewards in g} - 1        (i.e. not all correct, not all wrong)

    Each round samples `round_prompts` fresh prompts (default `prompts_per_step`, DAPO's generation batch)
    with `rollout.n` samples each; rounds stop when the batch is full or after `max_rounds` (DAPO's
    `max_num_gen_batches`). Useful groups beyond `prompts_per_step` are discarded, as in DAPO. When the cap is
    hit a warning names `sampling.max_rounds`; the batch is then what was found (topped up with dropped groups
    when `fill_with_dropped`), or the dropped groups when nothing passed.

    Source: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv:2503.14476,
    section 3.2 (dynamic sampling: over-sample and filter out prompts with accuracy 0 or 1); the reference
    recipe (verl `recipe/dapo`) errors out at the cap instead of warning.
    """

    def __init__(self, prompts, seed: int = 0, *, metric: Literal["reward", "accuracy"] = "reward",
                 max_rounds: Annotated[int, Field(ge=1)] = 8,
                 round_prompts: Annotated[int, Field(ge=1)] | None = None,
                 fill_with_dropped: bool = False):
        super().__init__(prompts, seed, max_rounds=max_rounds, round_prompts=round_prompts,
                         fill_with_dropped=fill_with_dropped)
        self.metric = metric

    def keep(self, group: Group) -> bool:
        """metric reward: the summed rewards differ; metric accuracy: the verifier's verdicts differ (DAPO's
        filter on accuracy, which ignores shaping terms such as the overlong punishment)."""
        if self.metric == "accuracy":
            return 0.0 < pass_rate(group) < 1.0
        return is_useful(group)


@SAMPLERS.register("difficulty_filter")
class DifficultyFilterSampler(FilteringSampler):
    r"""Balanced online difficulty filtering: keep prompts whose on-the-fly pass rate lies in [low, high].

        p(g)     = (1/n) * sum_i 1[sample i correct]        (the verifier's verdict, `Sample.correct`)
        keep(g)  <=>  low <= p(g) <= high

    Prompts of intermediate pass rate maximize the variance p(1 - p) that lower-bounds the policy's
    improvement, so the batch is filled ("stacked") with them: each round samples fresh prompts, keeps those
    in range, and rounds continue until `prompts_per_step` are collected or `max_rounds` is reached (then a
    warning names `sampling.max_rounds`, and the batch is filled as for `dynamic`).

    Source: Bae et al., "Online Difficulty Filtering for Reasoning Oriented Reinforcement Learning",
    arXiv:2504.03380. The defaults low = 0.25, high = 0.75 are a symmetric band around 0.5 chosen here (with
    n = 8 it keeps 2 to 6 correct answers of 8); set the band for your n.
    """

    def __init__(self, prompts, seed: int = 0, *,
                 low: Annotated[float, Field(ge=0.0, le=1.0)] = 0.25,
                 high: Annotated[float, Field(ge=0.0, le=1.0)] = 0.75,
                 max_rounds: Annotated[int, Field(ge=1)] = 8,
                 round_prompts: Annotated[int, Field(ge=1)] | None = None,
                 fill_with_dropped: bool = False):
        if low > high:
            raise ValueError(f"sampling.low must be <= sampling.high; got low={low}, high={high}")
        super().__init__(prompts, seed, max_rounds=max_rounds, round_prompts=round_prompts,
                         fill_with_dropped=fill_with_dropped)
        self.low, self.high = low, high

    def keep(self, group: Group) -> bool:
        return self.low - 1e-9 <= pass_rate(group) <= self.high + 1e-9

    def extra_metrics(self, batch: list[Group]) -> dict[str, float]:
        rates = [pass_rate(g) for g in batch]
        return {"pass_rate_mean": sum(rates) / len(rates) if rates else 0.0}
