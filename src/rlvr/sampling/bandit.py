"""DUMP: a UCB bandit over data distributions, scored by the expected absolute advantage."""

from __future__ import annotations

import math
from collections import deque
from typing import Annotated, Any, Literal

import torch
from pydantic import Field

from rlvr.sampling.base import SAMPLERS, BatchSampler, StepContext
from rlvr.sampling.common import RolloutMeter, index_split, sample_stats, sampling_metrics, step_generator
from rlvr.sampling.order import PromptSampler
from rlvr.types import Group, TaskRecord


def ucb_scores(mean_abs_adv: list[float], counts: list[int], exploration: float) -> list[float]:
    r"""UCB_j = L_j + c * sqrt(2 ln(sum_k n_k + 1) / (n_j + 1)), L_j the arm's windowed mean |advantage|."""
    total = sum(counts)
    return [m + exploration * math.sqrt(2.0 * math.log(total + 1) / (n + 1)) for m, n in zip(mean_abs_adv, counts)]


def softmax(scores: list[float], temperature: float) -> list[float]:
    top = max(scores)
    exps = [math.exp((s - top) / temperature) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def group_abs_advantages(group: Group, eps: float = 1e-6, normalize: bool = True) -> list[float]:
    """|A_i| of each sample under GRPO's group normalization ((r - mean) / (std + eps)), or |r - mean|."""
    rewards = [s.reward for s in group.samples]
    mean, std = sample_stats(rewards)
    return [abs(r - mean) / ((std + eps) if normalize else 1.0) for r in rewards]


def arm_key_fn(kind: str):
    if kind == "source":
        return lambda r: r.source or "default"
    if kind == "difficulty":
        return lambda r: f"d{r.difficulty}"
    return lambda r: f"{r.source or 'default'}/d{r.difficulty}"


@SAMPLERS.register("dump")
class DUMPSampler(BatchSampler):
    r"""DUMP: distribution-level curriculum. Each data distribution (arm) is scored by UCB on its expected
    absolute advantage, and prompts are drawn per arm by the softmax of the scores.

        L_j     = mean of |A| over the last `window` samples drawn from arm j        (0 before any)
        UCB_j   = L_j + c * sqrt( 2 ln(sum_k n_k + 1) / (n_j + 1) )                  n_j = samples from arm j
        w_j     = softmax_j( UCB_j / tau )
        each of the step's prompts: arm j ~ w, then arm j's next prompt (a seeded permutation per arm)

    |A| is the GRPO advantage of each sample within its group, (r - mean_g) / (std_g + eps) (`normalize=False`:
    |r - mean_g|, Dr.GRPO). After the rollout the sampled arms' windows and counts are updated, so the weights
    used at step t come from steps < t. Arms are `TaskRecord.source` (default), the difficulty, or both;
    they are found by scanning `index_size` prompts of the split (a seeded subset for large procedural
    splits). Metrics: `weight/<arm>` (the weights the step's prompts were drawn with) and `abs_adv/<arm>`.

    Source: Wang et al., "DUMP: Automated Distribution-Level Curriculum Learning for RL-based LLM
    Post-training", arXiv:2504.09710. Defaults from the authors' code (github.com/ZhentingWang/DUMP,
    verl/utils/curriculum_learning.py): window 300, c = 1, tau = 0.1.
    """

    def __init__(self, prompts, seed: int = 0, *,
                 arms: Literal["source", "difficulty", "source_difficulty"] = "source",
                 window: Annotated[int, Field(ge=1)] = 300,
                 exploration: Annotated[float, Field(ge=0.0)] = 1.0,
                 temperature: Annotated[float, Field(gt=0.0)] = 0.1,
                 normalize: bool = True,
                 index_size: Annotated[int, Field(ge=1)] | None = 20_000):
        super().__init__(prompts, seed)
        self.seed = seed
        self.arms_kind = arms
        self.window = window
        self.exploration = exploration
        self.temperature = temperature
        self.normalize = normalize
        buckets = index_split(prompts, arm_key_fn(arms), index_size, seed)
        self.arm_names = sorted(buckets, key=str)
        self.arm_indices = [buckets[a] for a in self.arm_names]
        self.arm_orders = [PromptSampler(len(ix), seed=seed * 101 + j) for j, ix in enumerate(self.arm_indices)]
        self.windows: list[deque[float]] = [deque(maxlen=window) for _ in self.arm_names]
        self.counts = [0] * len(self.arm_names)

    def weights(self) -> list[float]:
        means = [sum(w) / len(w) if w else 0.0 for w in self.windows]
        return softmax(ucb_scores(means, self.counts, self.exploration), self.temperature)

    def next_batch(self, ctx: StepContext) -> tuple[list[Group], dict[str, float]]:
        weights = self.weights()
        gen = step_generator(self.seed, ctx.step, salt=11)
        picks = torch.multinomial(torch.tensor(weights, dtype=torch.float64), ctx.prompts_per_step,
                                  replacement=True, generator=gen).tolist()
        records: list[TaskRecord] = []
        arm_of: list[int] = []
        for j in picks:
            records.append(self.prompts[self.arm_indices[j][self.arm_orders[j].next(1)[0]]])
            arm_of.append(j)
        meter = RolloutMeter(ctx.rollout)
        groups = meter(records, ctx.n)
        key = arm_key_fn(self.arms_kind)
        index = {a: j for j, a in enumerate(self.arm_names)}
        for j, group in zip(arm_of, groups):
            j = index.get(key(group.record), j)  # a paraphrased record keeps its arm
            advs = group_abs_advantages(group, normalize=self.normalize)
            self.windows[j].extend(advs)
            self.counts[j] += len(advs)
        extra = {f"weight/{a}": w for a, w in zip(self.arm_names, weights)}
        extra.update({f"abs_adv/{a}": (sum(w) / len(w) if w else 0.0) for a, w in zip(self.arm_names, self.windows)})
        return groups, sampling_metrics(groups, 0, meter, **extra)

    def state_dict(self) -> dict[str, Any]:
        return {"order": self.order.state_dict(), "arm_names": list(self.arm_names),
                "arm_orders": [o.state_dict() for o in self.arm_orders],
                "windows": [list(w) for w in self.windows], "counts": list(self.counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["arm_names"]) != list(self.arm_names):
            raise ValueError(f"the checkpoint's DUMP arms {state['arm_names']} differ from this task's "
                             f"{self.arm_names}; resume with the same task and sampling config")
        self.order.load_state_dict(state["order"])
        for o, s in zip(self.arm_orders, state["arm_orders"]):
            o.load_state_dict(s)
        self.windows = [deque(w, maxlen=self.window) for w in state["windows"]]
        self.counts = [int(c) for c in state["counts"]]
