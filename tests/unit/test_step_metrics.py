"""The step's rollout statistics leave excluded samples (a non-finite reward, scored 0) out of every
statistic, with hand-computed values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from rlvr.trainer.metrics import rollout_metrics
from rlvr.types import Group, Sample, TaskRecord


def _sample(reward: float, tokens: int, *, correct: bool, excluded: bool = False, truncated: bool = False) -> Sample:
    s = Sample(prompt_ids=[1], response_ids=list(range(tokens)), reward=reward, correct=correct,
               rewards={"correctness": reward}, finish_reason="length" if truncated else "stop")
    if excluded:
        s.meta["non_finite_reward"] = ["correctness"]
    return s


SCORER = SimpleNamespace(components=[("correctness", 1.0, None)], last_metrics={}, failures={})


def test_excluded_samples_are_left_out_of_every_statistic() -> None:
    # group a: valid rewards 1, 0 (+ an excluded one, scored 0); group b: valid 1, 1 (+ an excluded one): flat,
    # although its raw rewards 1, 1, 0 differ; group c: only excluded samples
    a = Group(TaskRecord(id="a", question=""), [1], [_sample(1.0, 4, correct=True), _sample(0.0, 2, correct=False),
                                                      _sample(0.0, 9, correct=False, excluded=True, truncated=True)])
    b = Group(TaskRecord(id="b", question=""), [1], [_sample(1.0, 3, correct=True), _sample(1.0, 5, correct=True),
                                                      _sample(0.0, 20, correct=False, excluded=True, truncated=True)])
    c = Group(TaskRecord(id="c", question=""), [1], [_sample(0.0, 7, correct=False, excluded=True)])
    m = rollout_metrics([a, b, c], SCORER)
    valid = [1.0, 0.0, 1.0, 1.0]  # mean 0.75, unbiased std sqrt(0.25)
    assert m["reward_mean"] == pytest.approx(0.75)
    assert m["reward_std"] == pytest.approx(math.sqrt(sum((r - 0.75) ** 2 for r in valid) / 3))
    assert m["reward/correctness"] == pytest.approx(0.75)
    assert m["accuracy"] == pytest.approx(3 / 4)
    assert m["response_length_mean"] == pytest.approx((4 + 2 + 3 + 5) / 4)
    assert m["response_length_max"] == 5.0
    assert m["truncated_frac"] == 0.0
    assert m["zero_std_frac"] == pytest.approx(2 / 3)  # b (flat once its excluded sample is out) and c (empty)
    assert m["response_tokens"] == 4 + 2 + 9 + 3 + 5 + 20 + 7  # generated: the work, excluded samples included
    assert m["reward_non_finite"] == 3.0 and m["reward_non_finite_frac"] == pytest.approx(3 / 7)


def test_without_excluded_samples_nothing_changes_and_all_excluded_gives_zeros() -> None:
    g = Group(TaskRecord(id="a", question=""), [1], [_sample(1.0, 4, correct=True), _sample(0.0, 2, correct=False,
                                                                                            truncated=True)])
    m = rollout_metrics([g], SCORER)
    assert (m["reward_mean"], m["accuracy"], m["truncated_frac"], m["zero_std_frac"]) == (0.5, 0.5, 0.5, 0.0)
    assert m["reward_std"] == pytest.approx(math.sqrt(0.5))
    dead = Group(TaskRecord(id="d", question=""), [1], [_sample(0.0, 3, correct=False, excluded=True)] * 2)
    m = rollout_metrics([dead], SCORER)
    assert (m["reward_mean"], m["reward_std"], m["accuracy"], m["zero_std_frac"]) == (0.0, 0.0, 0.0, 1.0)
    assert m["response_tokens"] == 6.0 and m["reward_non_finite_frac"] == 1.0
