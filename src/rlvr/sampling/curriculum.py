"""Curricula and training modes: difficulty schedules, DRIVE's hard-focus pool, one-shot RLVR, and turn-budget
schedules for agents (a hook an agent rollout calls; `TURN_BUDGETS`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from pydantic import Field

from rlvr.registry import Registry
from rlvr.sampling.base import SAMPLERS, BatchSampler, StepContext
from rlvr.sampling.common import RolloutMeter, index_split, pass_rate, sampling_metrics, step_generator
from rlvr.sampling.order import PromptSampler
from rlvr.types import Group, TaskRecord

# -- difficulty schedule ------------------------------------------------------------------------------------


def scheduled_target(step: int, total_steps: int, start: float, end: float, ramp: float) -> float:
    """Linear from `start` (step 0) to `end` (step ramp * total_steps), constant after."""
    horizon = max(ramp * max(total_steps, 1), 1e-9)
    return start + (end - start) * min(1.0, max(step, 0) / horizon)


@SAMPLERS.register("curriculum")
class DifficultyCurriculumSampler(BatchSampler):
    r"""A difficulty schedule for procedural tasks: the admitted difficulty rises with training progress.

        target(t)  = start + (end - start) * min(1, (t - 1) / (ramp * (T - 1)))   t = step (1..T), T = train.steps
        admitted   = {records : difficulty <= target(t)}                     mode "up_to" (easy-to-hard, cumulative)
                     {records : |difficulty - target(t)| <= width}           mode "window" (a moving band)
        prompts    = uniform over the admitted records (each difficulty bucket in its own seeded order)

    Uses `TaskRecord.difficulty` (numeric). `start`/`end` default to the smallest and largest difficulty in
    the split (scanned over `index_size` prompts). If no difficulty is admitted (a narrow window between
    levels), the nearest level is used.

    Source: the classic easy-to-hard curriculum (Bengio et al., "Curriculum Learning", ICML 2009) as a step
    schedule; used for procedural RLVR tasks e.g. by reasoning-gym's curricula (Stojanovski et al.,
    "REASONING GYM: Reasoning Environments for Reinforcement Learning with Verifiable Rewards",
    arXiv:2505.24760).
    """

    def __init__(self, prompts, seed: int = 0, *,
                 start: float | None = None,
                 end: float | None = None,
                 ramp: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0,
                 mode: Literal["up_to", "window"] = "up_to",
                 width: Annotated[float, Field(ge=0.0)] = 0.5,
                 index_size: Annotated[int, Field(ge=1)] | None = 20_000):
        super().__init__(prompts, seed)
        self.seed = seed
        buckets = index_split(prompts, lambda r: r.difficulty, index_size, seed)
        if None in buckets:
            raise ValueError("sampling: the 'curriculum' sampler needs TaskRecord.difficulty on every prompt; "
                             "this task leaves it unset")
        self.levels = sorted(buckets, key=float)
        self.bucket = [buckets[d] for d in self.levels]
        self.orders = [PromptSampler(len(ix), seed=seed * 97 + j) for j, ix in enumerate(self.bucket)]
        self.start = float(self.levels[0]) if start is None else start
        self.end = float(self.levels[-1]) if end is None else end
        self.ramp, self.mode, self.width = ramp, mode, width

    def admitted(self, target: float) -> list[int]:
        if self.mode == "up_to":
            levels = [j for j, d in enumerate(self.levels) if float(d) <= target + 1e-9]
        else:
            levels = [j for j, d in enumerate(self.levels) if abs(float(d) - target) <= self.width + 1e-9]
        if not levels:
            levels = [min(range(len(self.levels)), key=lambda j: abs(float(self.levels[j]) - target))]
        return levels

    def next_batch(self, ctx: StepContext) -> tuple[list[Group], dict[str, float]]:
        target = scheduled_target(ctx.step - 1, ctx.total_steps - 1, self.start, self.end, self.ramp)
        levels = self.admitted(target)
        sizes = torch.tensor([len(self.bucket[j]) for j in levels], dtype=torch.float64)
        gen = step_generator(self.seed, ctx.step, salt=23)
        picks = torch.multinomial(sizes / sizes.sum(), ctx.prompts_per_step, replacement=True, generator=gen)
        records = []
        for k in picks.tolist():
            j = levels[k]
            records.append(self.prompts[self.bucket[j][self.orders[j].next(1)[0]]])
        meter = RolloutMeter(ctx.rollout)
        groups = meter(records, ctx.n)
        diffs = [float(g.record.difficulty) for g in groups]
        return groups, sampling_metrics(groups, 0, meter, difficulty_target=target,
                                        difficulty_mean=sum(diffs) / len(diffs),
                                        difficulty_max_admitted=float(self.levels[levels[-1]]))

    def state_dict(self) -> dict[str, Any]:
        return {"order": self.order.state_dict(), "levels": [float(d) for d in self.levels],
                "orders": [o.state_dict() for o in self.orders]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if [float(d) for d in self.levels] != list(state["levels"]):
            raise ValueError("the checkpoint's curriculum levels differ from this task's; resume with the same "
                             "task and sampling config")
        self.order.load_state_dict(state["order"])
        for o, s in zip(self.orders, state["orders"]):
            o.load_state_dict(s)


# -- DRIVE: hard-focus pool ---------------------------------------------------------------------------------


@SAMPLERS.register("hard_focus")
class HardFocusSampler(BatchSampler):
    r"""DRIVE's hard-focus curriculum: train on a pool of prompts and keep retaining its hardest part.

        pool      = the first `pool_size` prompts of the seeded order
        each step: prompts_per_step prompts from the pool (a seeded permutation of it, cycling);
                   p(x) <- the latest observed pass rate of each sampled prompt
        every `phase_steps` steps: pool <- the ceil(keep_frac * |pool|) prompts with the lowest p(x)
                   (never-sampled prompts rank as hardest; the pool never shrinks below `min_pool`,
                   default prompts_per_step)

    Pair it with a large `rollout.n` as DRIVE does (64 rollouts per prompt in its second stage), so that hard
    prompts still produce some correct samples. Metrics: `pool_size`, `pool_pass_rate` (mean p over sampled
    pool prompts).

    Source: Zhu et al., "DRIVE: Data Curation Best Practices for Reinforcement Learning with Verifiable Reward
    in Competitive Code Generation", arXiv:2511.06307 (stage 2, "Pre-GRPO" with a hard-focus curriculum that
    continuously retains the most difficult instances). The retention schedule (fraction and interval) is
    not specified numerically in the abstract I could read; both are knobs here.
    """

    def __init__(self, prompts, seed: int = 0, *,
                 pool_size: Annotated[int, Field(ge=1)] = 256,
                 keep_frac: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5,
                 phase_steps: Annotated[int, Field(ge=1)] = 10,
                 min_pool: Annotated[int, Field(ge=1)] | None = None):
        super().__init__(prompts, seed)
        self.seed = seed
        size = min(pool_size, len(prompts))
        self.pool: list[int] = PromptSampler(len(prompts), seed=seed * 13 + 5).next(size)
        self.keep_frac, self.phase_steps, self.min_pool = keep_frac, phase_steps, min_pool
        self.pass_rates: dict[int, float] = {}
        self.cursor = 0
        self.pool_epoch = 0

    def _next(self, k: int, step: int) -> list[int]:
        out = []
        while len(out) < k:
            perm = torch.randperm(len(self.pool), generator=step_generator(self.seed, self.pool_epoch, 31)).tolist()
            take = min(k - len(out), len(self.pool) - self.cursor)
            out.extend(self.pool[i] for i in perm[self.cursor:self.cursor + take])
            self.cursor += take
            if self.cursor >= len(self.pool):
                self.cursor, self.pool_epoch = 0, self.pool_epoch + 1
        return out

    def _retain(self, floor: int) -> None:
        keep = max(math.ceil(self.keep_frac * len(self.pool)), min(floor, len(self.pool)))
        ranked = sorted(self.pool, key=lambda i: (self.pass_rates.get(i, -1.0), i))
        self.pool = ranked[:keep]
        self.cursor, self.pool_epoch = 0, self.pool_epoch + 1

    def next_batch(self, ctx: StepContext) -> tuple[list[Group], dict[str, float]]:
        if ctx.step > 1 and (ctx.step - 1) % self.phase_steps == 0:
            self._retain(self.min_pool or ctx.prompts_per_step)
        indices = self._next(ctx.prompts_per_step, ctx.step)
        meter = RolloutMeter(ctx.rollout)
        groups = meter([self.prompts[i] for i in indices], ctx.n)
        rates = []
        for i, g in zip(indices, groups):
            self.pass_rates[i] = pass_rate(g)
            rates.append(self.pass_rates[i])
        return groups, sampling_metrics(groups, 0, meter, pool_size=len(self.pool),
                                        pool_pass_rate=sum(rates) / len(rates))

    def state_dict(self) -> dict[str, Any]:
        return {"order": self.order.state_dict(), "pool": list(self.pool), "pass_rates": dict(self.pass_rates),
                "cursor": self.cursor, "pool_epoch": self.pool_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order.load_state_dict(state["order"])
        self.pool = [int(i) for i in state["pool"]]
        self.pass_rates = {int(k): float(v) for k, v in state["pass_rates"].items()}
        self.cursor, self.pool_epoch = int(state["cursor"]), int(state["pool_epoch"])


# -- one-shot RLVR ------------------------------------------------------------------------------------------


def historical_accuracy_variance(rows: list[dict]) -> list[tuple[str, float, int]]:
    """(prompt id, variance of its per-step training accuracy, steps it was trained on) for every prompt of a
    run's rollouts.jsonl rows, highest variance first (ties: the prompt seen first). A prompt's accuracy at a
    step is the mean `correct` of its samples stored at that step; the variance is the population variance over
    its steps, and a prompt seen at fewer than two steps has none (left out)."""
    per: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        if r.get("correct") is None or "prompt_id" not in r:
            continue
        per.setdefault(str(r["prompt_id"]), {}).setdefault(int(r["step"]), []).append(float(bool(r["correct"])))
    out = []
    for order, (pid, steps) in enumerate(per.items()):
        accs = [sum(v) / len(v) for _, v in sorted(steps.items())]
        if len(accs) >= 2:
            mean = sum(accs) / len(accs)
            out.append((order, pid, sum((a - mean) ** 2 for a in accs) / len(accs), len(accs)))
    out.sort(key=lambda t: (-t[2], t[0]))
    return [(pid, var, n) for _, pid, var, n in out]


def historical_variance_choice(history: str) -> str:
    """The id of the prompt whose training accuracy varied most in a pilot run (a run directory or its
    rollouts.jsonl; the pilot should train on a small pool for several epochs with logging.rollouts_every=1).

    Source: Wang et al., arXiv:2504.20571, section 2: examples are ranked by the variance of their training
    accuracy over the epochs of a full training run, and the top one is the one-shot example."""
    import json

    path = Path(history)
    if path.is_dir():
        path = path / "rollouts.jsonl"
    if not path.is_file():
        raise ValueError(f"sampling.history: {history} does not exist; give a pilot run's directory or its "
                         "rollouts.jsonl")
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
    ranking = historical_accuracy_variance(rows)
    if not ranking:
        raise ValueError(f"sampling.history: no prompt in {history} was trained on at two or more steps; run the "
                         "pilot longer on a smaller pool (task.train_size) with logging.rollouts_every=1")
    return ranking[0][0]


@SAMPLERS.register("one_shot")
class OneShotSampler(BatchSampler):
    r"""One-shot RLVR: a single training example, repeated to fill every step's batch.

        batch(t) = [x*] * prompts_per_step, rollout.n samples each (separate groups)

    x* is the split's record at `index`, the record whose `TaskRecord.id` is `id` (searched over the first
    `search_limit` records), or, with `history`, the paper's choice: the record whose training accuracy varied
    most over a pilot run (`historical_variance_choice`).

    Source: Wang et al., "Reinforcement Learning for Reasoning in Large Language Models with One Training
    Example", arXiv:2504.20571 (the example is duplicated to the batch size, 128, with 8 rollouts each).
    """

    def __init__(self, prompts, seed: int = 0, *,
                 index: Annotated[int, Field(ge=0)] = 0,
                 id: str | None = None,
                 history: str | None = None,
                 search_limit: Annotated[int, Field(ge=1)] = 100_000):
        super().__init__(prompts, seed)
        if history is not None:
            if id is not None:
                raise ValueError("sampling: give one of id and history, not both")
            id = historical_variance_choice(history)
        if id is not None:
            for i in range(min(len(prompts), search_limit)):
                if prompts[i].id == id:
                    index = i
                    break
            else:
                raise ValueError(f"sampling.id: no training record has id {id!r} among the first "
                                 f"{min(len(prompts), search_limit)}; check the id or raise sampling.search_limit")
        if index >= len(prompts):
            raise ValueError(f"sampling.index: {index} is past the end of the training split ({len(prompts)} "
                             "records)")
        self.index = index
        self.example: TaskRecord = prompts[index]

    def next_batch(self, ctx: StepContext) -> tuple[list[Group], dict[str, float]]:
        meter = RolloutMeter(ctx.rollout)
        groups = meter([self.example] * ctx.prompts_per_step, ctx.n)
        rates = [pass_rate(g) for g in groups]
        return groups, sampling_metrics(groups, 0, meter, example_pass_rate=sum(rates) / len(rates))


# -- turn budgets for agents (ScalingInter-RL) --------------------------------------------------------------

TURN_BUDGETS: Registry = Registry("turn budget")


@TURN_BUDGETS.register("fixed")
class FixedTurnBudget:
    """The same interaction budget every step."""

    def __init__(self, *, turns: Annotated[int, Field(ge=1)] = 10):
        self.turns = turns

    def budget(self, step: int, total_steps: int) -> int:
        return self.turns


@TURN_BUDGETS.register("scaling_inter_rl")
class ScalingInterTurnBudget:
    r"""ScalingInter-RL: start with a short interaction horizon and extend it in stages.

        h(t) = min(h_max, h_0 + delta * floor(t / every))

    Short horizons first let the agent master exploitation (reliable short solutions); longer ones later
    allow exploration and planning without early collapse.

    Source: Xi et al., "AgentGym-RL: Training LLM Agents for Long-Horizon Decision Making through Multi-Turn
    Reinforcement Learning", arXiv:2509.08755 (ScalingInter-RL, a progressive horizon schedule). The stage
    lengths and increments are task-specific in the paper; these defaults are placeholders to set per task.
    """

    def __init__(self, *, start: Annotated[int, Field(ge=1)] = 5, increment: Annotated[int, Field(ge=0)] = 5,
                 every: Annotated[int, Field(ge=1)] = 100, max_turns: Annotated[int, Field(ge=1)] = 30):
        self.start, self.increment, self.every, self.max_turns = start, increment, every, max_turns

    def budget(self, step: int, total_steps: int) -> int:
        return min(self.max_turns, self.start + self.increment * (max(step, 0) // self.every))


@TURN_BUDGETS.register("linear")
class LinearTurnBudget:
    """h(t) = round(start + (end - start) * t / T), T = total_steps."""

    def __init__(self, *, start: Annotated[int, Field(ge=1)] = 2, end: Annotated[int, Field(ge=1)] = 20):
        self.start, self.end = start, end

    def budget(self, step: int, total_steps: int) -> int:
        return int(round(scheduled_target(step, total_steps, self.start, self.end, 1.0)))
