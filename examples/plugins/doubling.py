"""A plugin: a task and an advantage estimator of your own, named in a recipe after `plugins:` imports them.

    rlvr train examples/plugins/doubling.yaml
    rlvr train recipes/grpo.yaml --plugin examples/plugins/doubling.py task=doubling algorithm.advantage=mean_baseline

`rlvr config show --plugin examples/plugins/doubling.py` lists what it registered.
"""

import random

import torch

from rlvr.algorithms import ADVANTAGES, group_stats
from rlvr.rewards.verifiers import extract_answer
from rlvr.tasks import TASKS, Task, VerifyResult
from rlvr.types import TaskRecord

CALLS = {"mean_baseline": 0}  # how often the estimator ran in this process (the example's test reads it)


@TASKS.register("doubling")
class DoublingTask(Task):
    """Add a number to itself: n+n, answered as the built-in model answers additions."""

    default_prompt_template = "{question}="

    def __init__(self, *, digits: int = 3, eval_size: int = 50, seed: int = 0, **templates):
        super().__init__(**templates)
        rng = random.Random(seed)
        numbers = rng.sample(range(10 ** (digits - 1), 10**digits), min(5000, 9 * 10 ** (digits - 1)))
        records = [TaskRecord(id=f"doubling-{n}", question=f"{n}+{n}", answer=str(2 * n)) for n in numbers]
        self._heldout, self._train = records[:eval_size], records[eval_size:]

    @property
    def train(self):
        return self._train

    @property
    def heldout(self):
        return self._heldout

    def verify(self, response, record):
        found = extract_answer(response, "auto")
        ok = found is not None and found.strip() == record.answer
        return VerifyResult(float(ok), ok, "correct" if ok else f"expected {record.answer}, got {found}", found)


@ADVANTAGES.register("mean_baseline")
def mean_baseline_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, *, scale: float = 1.0):
    """A_i = scale * (r_i - mean(r_group)): REINFORCE with the group mean as baseline, no std division."""
    CALLS["mean_baseline"] += 1
    mean, _, _ = group_stats(rewards, group_ids)
    return (scale * (rewards - mean)).float()


mean_baseline_advantages.needs_group = True
