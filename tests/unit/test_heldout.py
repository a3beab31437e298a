"""Held out by construction (rlvr/tasks/heldout.py): the split is a property of the problem."""

from __future__ import annotations

import itertools

import pytest
from script_loader import load_script

from rlvr.tasks.base import LazySplit
from rlvr.tasks.countdown import (
    HELD_OUT_FAMILY, HELD_OUT_SHARE, CountdownTask, canonical_form, canonical_problem, countdown_held_out,
)
from rlvr.tasks.heldout import held_out_score, is_held_out
from rlvr.types import TaskRecord



def test_the_score_is_a_fixed_keyed_hash_of_the_canonical_form():
    a = held_out_score("countdown", "1 2 3 -> 6")
    assert a == held_out_score("countdown", "1 2 3 -> 6")
    assert 0.0 <= a < 1.0
    assert a != held_out_score("countdown", "1 2 3 -> 5")
    assert a != held_out_score("addition", "1 2 3 -> 6")  # the family is part of the key


def test_the_pool_takes_the_share_it_is_given():
    scores = [held_out_score("t", str(i)) for i in range(20_000)]
    share = sum(s < 0.05 for s in scores) / len(scores)
    # binomial: sd = sqrt(0.05 * 0.95 / 20000) = 0.0015; 4 sd either side
    assert abs(share - 0.05) < 0.006


@pytest.mark.parametrize("share", [0.0, 1.0, -0.1, 1.5])
def test_a_share_outside_0_1_is_refused(share):
    with pytest.raises(ValueError, match="share"):
        is_held_out("t", "x", share)


def test_canonical_form_is_the_numbers_as_a_multiset_and_the_target():
    assert canonical_form([7, 3, 12, 5], 31) == canonical_form([3, 5, 7, 12], 31) == "3 5 7 12 -> 31"
    assert canonical_form([3, 5, 7], 31) != canonical_form([3, 5, 7, 7], 31)


VARIANTS = [{}, {"pair_only": False}, {"seed": 1}, {"sizes": (4,)}, {"sizes": (3,), "seed": 7, "eval_size": 60},
            {"pair_frac": 0.8, "pair_only": False}]


def test_no_countdown_variant_trains_on_any_variants_held_out_problem():
    tasks = [CountdownTask(**v) for v in VARIANTS]
    held = set()
    for task in tasks:
        assert all(countdown_held_out(r) for r in task.heldout)  # drawn from the pool only
        assert len({canonical_problem(r) for r in task.heldout}) == len(task.heldout)
        held |= {canonical_problem(r) for r in task.heldout}
    for task in tasks:
        train = [task.train[i] for i in range(3000)]
        assert not any(countdown_held_out(r) for r in train)
        assert not {canonical_problem(r) for r in train} & held


def test_the_held_out_pool_covers_a_twentieth_of_the_problem_space():
    ours = [canonical_form(ns, t) for ns in itertools.combinations_with_replacement(range(1, 11), 3)
            for t in range(1, 101)]
    share = sum(is_held_out(HELD_OUT_FAMILY, c, HELD_OUT_SHARE) for c in ours) / len(ours)
    assert abs(share - HELD_OUT_SHARE) < 0.01  # 22,000 forms: sd 0.0015


def test_a_held_out_split_larger_than_the_pool_names_the_key():
    with pytest.raises(Exception, match="task.eval_size .*held-out pool"):
        CountdownTask(sizes=(3,), max_number=4, eval_size=200)


def test_lazy_split_skips_held_out_records():
    def make(i: int, attempt: int) -> TaskRecord:
        return TaskRecord(id=f"{i}-{attempt}", question=f"q{i}-{attempt}", answer="")

    split = LazySplit(5, make, held_out=lambda r: r.question.endswith("-0"))
    assert [r.question for r in split] == [f"q{i}-1" for i in range(5)]


def test_no_built_in_model_was_built_from_a_held_out_problem():
    """The sources each build script draws from, against the held-out split of every task variant its model
    is evaluated on (scripts/heldout_overlap.py; the full counts are in docs/models.md)."""
    rows = load_script("heldout_overlap").overlap_rows(limit=1500)
    assert {r["model"].split(" ")[0] for r in rows} >= {"builtin", "builtin-teacher", "builtin-lab",
                                                        "builtin-lab-teacher", "builtin-vl", "tool"}
    assert [r for r in rows if r["overlap"]] == []
