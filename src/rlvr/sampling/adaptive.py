"""Reinforce-Ada: adaptive multi-round sampling by successive elimination, fixed-size groups with enforced
reward diversity, and a baseline from everything sampled for the prompt.

Also registers the `reinforce_ada` advantage estimator (see its docstring for what it can use today).
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field

from rlvr.algorithms.advantages import ADVANTAGES, group_stats
from rlvr.sampling.base import SAMPLERS, BatchSampler, StepContext
from rlvr.sampling.common import RolloutMeter, regroup, sample_stats, sampling_metrics
from rlvr.types import Group, Sample


def balanced_selection(positives: list[Sample], negatives: list[Sample], size: int) -> list[Sample]:
    """`size` samples, half positive and half negative when the pool allows, else topped up from the larger
    side; earliest-drawn first. Both signs appear whenever the pool has both and size >= 2."""
    take_pos = min(size // 2, len(positives))
    take_neg = min(size - take_pos, len(negatives))
    short = size - take_pos - take_neg
    if short > 0:  # one side ran out: fill from the other
        extra_pos = min(short, len(positives) - take_pos)
        take_pos += extra_pos
        take_neg += min(short - extra_pos, len(negatives) - take_neg)
    return positives[:take_pos] + negatives[:take_neg]


@SAMPLERS.register("reinforce_ada")
class ReinforceAdaSampler(BatchSampler):
    r"""Reinforce-Ada: sample in rounds, retire each prompt once it has enough signal, keep fixed-size groups.

        active = the step's prompts_per_step prompts
        for round in 1..max_rounds while active:
            draw round_n samples for every active prompt; add them to the prompt's pool
            retire the prompts whose pool satisfies the exit rule:
                positive:  #{r > threshold} >= 1
                balanced:  #{r > threshold} >= n//2  and  #{r <= threshold} >= n - n//2
        each prompt's group = n samples from its whole pool: n//2 positives and n - n//2 negatives when
            available, topped up from the other side (so both signs appear whenever the pool has both)
        each kept sample gets meta["prompt_mean_reward"] = mean reward over the prompt's whole pool,
            meta["prompt_std_reward"] (unbiased), meta["prompt_samples"] = pool size,
            meta["prompt_positives"] = #{r > threshold} in the pool;
            meta["baseline"] / meta["baseline_std"] repeat the mean and std under the generic names a
            per-sample baseline input would read

    Prompts that never meet the exit rule in `max_rounds` are kept with the same selection from whatever was
    drawn (the reference's fallback). n is `group_size` or `rollout.n`.

    The global baseline: the paper computes A_i = r_i - mean(all rewards drawn for the prompt) (no std
    division, `global_stat_est=True`, `norm_adv_by_std_in_grpo=False` in the authors' script), not the mean
    of the n kept samples, which the balanced selection pins near 1/2. That mean is in
    `meta["prompt_mean_reward"]`; the trainer does not yet pass per-sample values from `Sample.meta` to
    advantage estimators (see the `reinforce_ada` estimator).

    Source: Xiong et al., "Reinforce-Ada: An Adaptive Sampling Framework for Reinforce-Style LLM Training",
    arXiv:2510.04996 (v1/v2: successive elimination with Reinforce-Ada-pos and Reinforce-Ada-balance exits).
    Checked against the authors' verl code (github.com/RLHFlow/Reinforce-Ada, ray_trainer.py
    `_generate_multi_round_adaptive_downsampling`, core_algos.py GRPO with global statistics): defaults
    max_rounds = 4, round_n = 8, positive_threshold (r > threshold is positive); their script uses n = 4.
    """

    def __init__(self, prompts, seed: int = 0, *,
                 exit_rule: Literal["balanced", "positive"] = "balanced",
                 round_n: Annotated[int, Field(ge=1)] = 8,
                 max_rounds: Annotated[int, Field(ge=1)] = 4,
                 positive_threshold: float = 0.5,
                 group_size: Annotated[int, Field(ge=1)] | None = None):
        super().__init__(prompts, seed)
        self.exit_rule = exit_rule
        self.round_n = round_n
        self.max_rounds = max_rounds
        self.threshold = positive_threshold
        self.group_size = group_size

    def _done(self, positives: int, negatives: int, n: int) -> bool:
        if self.exit_rule == "positive":
            return positives >= 1
        return positives >= n // 2 and negatives >= n - n // 2

    def next_batch(self, ctx: StepContext) -> tuple[list[Group], dict[str, float]]:
        n = self.group_size or ctx.n
        records = self.take(ctx.prompts_per_step)
        meter = RolloutMeter(ctx.rollout)
        first: list[Group | None] = [None] * len(records)
        pools: list[tuple[list[Sample], list[Sample]]] = [([], []) for _ in records]
        done = [False] * len(records)
        retired_at: list[int] = [0] * len(records)
        for round_index in range(1, self.max_rounds + 1):
            active = [i for i in range(len(records)) if not done[i]]
            if not active:
                break
            groups = meter([records[i] for i in active], self.round_n)
            for i, group in zip(active, groups):
                first[i] = first[i] or group
                pos, neg = pools[i]
                for s in group.samples:
                    if s.excluded:  # a non-finite reward: neither sign, and out of the prompt's statistics
                        continue
                    (pos if s.reward > self.threshold else neg).append(s)
                if self._done(len(pos), len(neg), n):
                    done[i], retired_at[i] = True, round_index
        batch: list[Group] = []
        for i, (pos, neg) in enumerate(pools):
            if first[i] is None:
                continue
            everything = pos + neg
            mean, std = sample_stats([s.reward for s in everything])
            chosen = balanced_selection(pos, neg, n)
            for s in chosen:
                s.meta.update(prompt_mean_reward=mean, prompt_std_reward=std, prompt_samples=len(everything),
                              prompt_positives=len(pos), baseline=mean, baseline_std=std)
            batch.append(regroup(first[i], chosen))
        finished = sum(done)
        return batch, sampling_metrics(
            batch, 0, meter,
            prompts_finished=finished, prompts_unfinished=len(records) - finished,
            samples_discarded=meter.samples - sum(len(g.samples) for g in batch),
            mean_retire_round=(sum(retired_at) / finished) if finished else float(self.max_rounds),
        )


@ADVANTAGES.register("reinforce_ada")
def reinforce_ada_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    norm_by_std: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    r"""Reinforce-Ada's advantage: the reward minus a baseline, optionally over a std.

        A_i = (r_i - b_i) / (s_i + eps  if norm_by_std  else 1)

    In the paper b_i and s_i are the mean and std of *every* reward drawn for the prompt during adaptive
    sampling (the `reinforce_ada` sampler stores them as `Sample.meta["prompt_mean_reward"]` /
    `["prompt_std_reward"]`). The trainer's advantage inputs (rlvr.algorithms.inputs.ADVANTAGE_INPUTS) do not
    yet carry a per-sample baseline, so this estimator uses the kept group's own mean and std; with binary
    rewards and a balanced group that is b = 1/2. `global_baseline_advantages` is the paper's formula for when
    the baseline becomes an input. Paper default: norm_by_std = False.

    Source: Xiong et al., "Reinforce-Ada: An Adaptive Sampling Framework for Reinforce-Style LLM Training",
    arXiv:2510.04996.
    """
    mean, std, _ = group_stats(rewards, group_ids)
    return global_baseline_advantages(rewards, mean, std, norm_by_std=norm_by_std, eps=eps)


reinforce_ada_advantages.needs_group = True  # type: ignore[attr-defined]


def global_baseline_advantages(rewards: torch.Tensor, baseline: torch.Tensor, scale: torch.Tensor, *,
                               norm_by_std: bool = False, eps: float = 1e-6) -> torch.Tensor:
    r"""A_i = (r_i - b_i) / (s_i + eps) if `norm_by_std` else r_i - b_i, for per-sample baselines b and
    scales s ([N] each, e.g. the prompt's mean and std over every sample Reinforce-Ada drew for it). A pool
    of a single sample (s = 0 and b = r) gives 0."""
    centered = rewards.to(torch.float64) - baseline.to(torch.float64)
    if norm_by_std:
        centered = centered / (scale.to(torch.float64) + eps)
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    return centered.to(out_dtype)


def pool_baselines(groups: list[Group]) -> tuple[torch.Tensor, torch.Tensor]:
    """[N] baselines and scales from the sampler's meta (the group's own mean/std where a sample has none),
    in `Batch.from_groups` row order: what the trainer would pass as the per-sample baseline input."""
    means, stds = [], []
    for g in groups:
        rewards = [s.reward for s in g.samples]
        own_mean, own_std = sample_stats(rewards)
        for s in g.samples:
            means.append(float(s.meta.get("prompt_mean_reward", own_mean)))
            stds.append(float(s.meta.get("prompt_std_reward", own_std)))
    return torch.tensor(means, dtype=torch.float64), torch.tensor(stds, dtype=torch.float64)


__all__ = ["ReinforceAdaSampler", "balanced_selection", "global_baseline_advantages", "pool_baselines",
           "reinforce_ada_advantages"]
