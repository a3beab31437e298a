"""Rewards: named components, each scoring a whole group, combined by weights into `Sample.reward`.

A reward component is a registered class whose instances are called as `component(group, task)` and return
one `RewardOutput` per sample. Components see the whole group so that label-free rewards (majority vote)
fit the same interface as per-sample verifiers. A failure in one sample gives that sample 0 with the reason
recorded; it never stops the run.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from rlvr.registry import Registry
from rlvr.types import Group

log = logging.getLogger(__name__)

REWARDS: Registry = Registry("reward")


@dataclass
class RewardOutput:
    value: float
    reason: str = ""
    correct: bool | None = None
    failed: bool = False  # the scorer raised; counted in the metrics by reason


class RewardComponent(Protocol):
    def __call__(self, group: Group, task: Any) -> list[RewardOutput]: ...


@REWARDS.register("correctness")
class CorrectnessReward:
    """The task's verifier: reward in [0, 1] and a reason per sample. Also sets `Sample.correct`."""

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        out = []
        for sample in group.samples:
            try:
                v = task.verify(sample.text, group.record)
                out.append(RewardOutput(float(v.reward), v.reason, bool(v.correct)))
            except Exception as err:  # a verifier bug must cost one sample, not the run
                reason = f"verifier error: {type(err).__name__}: {err}"
                log.warning("%s (prompt %s)", reason, group.record.id)
                out.append(RewardOutput(0.0, reason, False, failed=True))
        return out


class RewardFunction:
    """The weighted sum of reward components: fills `rewards`, `reward` and `correct` of every sample."""

    def __init__(self, components: list[tuple[str, float, RewardComponent]]):
        self.components = components
        self.failures: Counter[str] = Counter()

    @classmethod
    def from_config(cls, specs: list[Any]) -> RewardFunction:
        return cls([(s.name, s.weight, REWARDS.build(s.name, s.params, where="rewards")) for s in specs])

    def __call__(self, groups: list[Group], task: Any) -> None:
        for group in groups:
            totals = [0.0] * len(group.samples)
            for name, weight, component in self.components:
                try:
                    outputs = component(group, task)
                    if len(outputs) != len(group.samples):
                        raise ValueError(f"returned {len(outputs)} rewards for {len(group.samples)} samples")
                except Exception as err:
                    log.warning("reward '%s' failed on %s: %s", name, group.record.id, err)
                    # correct=None: a broken shaping term must not overwrite the verifier's verdict
                    outputs = [RewardOutput(0.0, f"reward error: {type(err).__name__}: {err}", None, failed=True)
                               for _ in group.samples]
                for i, (sample, o) in enumerate(zip(group.samples, outputs)):
                    sample.rewards[name] = o.value
                    sample.meta.setdefault("reasons", {})[name] = o.reason
                    if o.correct is not None:
                        sample.correct = o.correct
                    if o.failed:
                        self.failures[f"{name}: {_failure_kind(o.reason)}"] += 1
                    totals[i] += weight * o.value
            for sample, total in zip(group.samples, totals):
                sample.reward = total


def _failure_kind(reason: str) -> str:
    """'verifier error: ValueError: bad' -> 'ValueError'; a reason without that shape is used as it is."""
    parts = [p.strip() for p in reason.split(":")]
    if len(parts) >= 3 and parts[0].endswith("error"):
        return parts[1]
    return parts[0][:60] or "failed"
