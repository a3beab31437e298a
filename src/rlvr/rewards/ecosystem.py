"""The rubric of a verifiers environment as a reward component (`rewards: [{name: verifiers_rubric}]`)."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from rlvr.rewards.base import REWARDS, RewardOutput
from rlvr.types import Group

log = logging.getLogger(__name__)


@REWARDS.register("verifiers_rubric")
class VerifiersRubricReward:
    r"""The environment's rubric, weighted as verifiers weights it:

        R = sum_i w_i * f_i(task, trace)

    over its `@vf.reward` functions f_i with weights w_i. A multi-turn episode is scored on its whole conversation,
    as the environment recorded it when the episode ended (`Sample.meta["env_episode"]["rubric"]`); a single-turn
    sample on the prompt and its reply. Each function's score is kept in `Sample.meta["rubric"]` and its step mean
    logged as `reward/verifiers_rubric/<function>`; `correct` follows the task's `correct_reward`. A function
    that raises, times out or returns a non-number scores 0 with the reason (`verifiers_rubric/errors` counts
    them); an episode whose environment failed scores 0 with the environment's error.
    Needs `task.name=verifiers`.
    """

    def __init__(self) -> None:
        self._sums: dict[str, float] = defaultdict(float)
        self._count = 0
        self._errors = 0

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        score_response = getattr(task, "score_response", None)
        if score_response is None:
            raise ValueError("the verifiers_rubric reward scores verifiers environments; set task.name=verifiers")
        out = []
        for s in group.samples:
            episode = s.meta.get("env_episode") or {}
            if "rubric" in episode or "error" in episode:
                scores = dict(episode.get("rubric") or {"rewards": {}, "metrics": {}, "total": 0.0, "errors": []})
                if episode.get("error"):
                    scores["error"] = episode["error"]
            else:
                scores = score_response(s.text, group.record)
            s.meta["rubric"] = scores
            self._count += 1
            self._errors += len(scores.get("errors", [])) + bool(scores.get("error"))
            for name, r in scores.get("rewards", {}).items():
                self._sums[name] += float(r["score"])
            failed = bool(scores.get("error"))
            total = 0.0 if failed else float(scores.get("total", 0.0))
            out.append(RewardOutput(total, task.describe(scores), None if failed else task.is_correct(scores),
                                    failed=failed))
        return out

    def metrics(self) -> dict[str, float]:
        n = max(self._count, 1)
        out = {name: total / n for name, total in self._sums.items()}
        if self._count:
            out["errors"] = float(self._errors)
        self._sums, self._count, self._errors = defaultdict(float), 0, 0
        return out
