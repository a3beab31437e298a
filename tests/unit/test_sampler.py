"""The prompt sampler: deterministic, covers each epoch exactly once, and resumes from its state."""

from __future__ import annotations

import pytest

from rlvr.sampling import PromptSampler


def test_each_epoch_is_a_permutation():
    s = PromptSampler(10, seed=3)
    first, second = s.next(10), s.next(10)
    assert sorted(first) == list(range(10)) == sorted(second)
    assert first != second


def test_deterministic_and_seed_dependent():
    assert PromptSampler(50, seed=1).next(20) == PromptSampler(50, seed=1).next(20)
    assert PromptSampler(50, seed=1).next(20) != PromptSampler(50, seed=2).next(20)


def test_crossing_epochs_and_resume_from_state():
    a = PromptSampler(7, seed=0)
    a.next(5)
    state = a.state_dict()
    rest = a.next(12)
    b = PromptSampler(7, seed=0)
    b.load_state_dict(state)
    assert b.next(12) == rest


def test_state_from_another_task_is_rejected():
    s = PromptSampler(7)
    with pytest.raises(ValueError, match="same task"):
        s.load_state_dict({**PromptSampler(8).state_dict()})


def test_empty_split_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        PromptSampler(0)
