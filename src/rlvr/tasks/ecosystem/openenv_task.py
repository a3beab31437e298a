"""The prompts of an OpenEnv environment: `task.name=openenv` (with `agent.environment=openenv`).

An OpenEnv environment (Meta's `openenv`, 0.10) has no dataset: each episode starts with `reset(seed=...)` on
its server, and the first observation is the prompt. This task makes `train_size` + `eval_size` seeded records
(`meta["seed"]`, plus `reset_kwargs` for every reset); the `openenv` environment of rlvr/rollout/ecosystem
resets the server with them. The environment's step rewards are the reward: train with
`rewards: [{name: env_reward}]`. The task's own verifier has nothing to check and scores 0.
"""

from __future__ import annotations

import random
from typing import Annotated, Any

from pydantic import Field

from rlvr.tasks.base import TASKS, Task, TaskError, VerifyResult
from rlvr.types import TaskRecord


@TASKS.register("openenv")
class OpenEnvTask(Task):
    """Seeded episodes of an OpenEnv server; the question is replaced by the server's first observation."""

    name = "openenv"

    def __init__(self, *, train_size: Annotated[int, Field(ge=1)] = 10_000,
                 eval_size: Annotated[int, Field(ge=1)] = 50, seed: Annotated[int, Field(ge=0)] = 0,
                 reset_kwargs: Annotated[dict[str, Any], Field(description="passed to every reset")] = {},  # noqa: B006
                 prompt_template: str | None = None, chat_prompt_template: str | None = None,
                 system_prompt: str | None = None):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        seeds = random.Random(f"openenv-{seed}").sample(range(2**31 - 1), train_size + eval_size)
        if len(set(seeds)) != len(seeds):
            raise TaskError("task: could not draw distinct episode seeds")

        def record(split: str, i: int, s: int) -> TaskRecord:
            # the question must differ per record (held-out questions never reappear in training)
            return TaskRecord(id=f"openenv-{split}-{i}", question=f"episode seed {s}", answer="",
                              source="openenv",
                              meta={"seed": s, "reset_kwargs": dict(reset_kwargs)})

        self._heldout = [record("heldout", i, s) for i, s in enumerate(seeds[:eval_size])]
        self._train = [record("train", i, s) for i, s in enumerate(seeds[eval_size:])]

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        return VerifyResult(0.0, False, "OpenEnv episodes are scored by the environment's rewards "
                            "(rewards: [{name: env_reward}])")
