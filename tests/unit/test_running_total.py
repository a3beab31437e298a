"""The running-total task (the lab's second task): its problems, its verifier by hand values and against hostile
output, its vote, its held-out split, and the teacher that writes its lab model's data."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest

from rlvr.tasks import build_task
from rlvr.tasks.base import TaskError
from rlvr.tasks.running_total import (
    MAX_TOTAL, RunningTotalTask, apply_op, final_number, parse_problem, running_total_held_out, solve,
)
from rlvr.types import TaskRecord

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from build_lab_total_model import BLIND_SPOT_MIN, blind_spot, teacher_solution  # noqa: E402

RECORD = TaskRecord(id="x", question="7 +5 *3 -4", answer="32", difficulty=3,
                    meta={"start": 7, "steps": [("+", 5), ("*", 3), ("-", 4)]})


@pytest.fixture(scope="module")
def task():
    return RunningTotalTask(train_size=2000, eval_size=50)


def test_problems_by_hand():
    assert parse_problem("7 +5 *3 -4") == (7, [("+", 5), ("*", 3), ("-", 4)])
    assert solve(7, [("+", 5), ("*", 3), ("-", 4)]) == [12, 36, 32]  # left to right, no precedence
    assert apply_op(3, "-", 5) is None and apply_op(500, "*", 2) is None  # totals stay in 0..MAX_TOTAL
    assert apply_op(MAX_TOTAL - 1, "+", 1) == MAX_TOTAL


def test_generated_problems_are_consistent_and_answers_not_in_the_prompt(task):
    for record in [*task.heldout, *task.train[:500]]:
        start, steps = parse_problem(record.question)
        assert (start, steps) == (record.meta["start"], [tuple(s) for s in record.meta["steps"]])
        totals = solve(start, steps)
        assert str(totals[-1]) == record.answer and record.difficulty == len(steps)
        assert all(0 <= t <= MAX_TOTAL for t in totals)
    sizes = Counter(r.difficulty for r in task.train[:500])
    assert set(sizes) == {2, 3, 4, 5}


@pytest.mark.parametrize("response, correct, reason", [
    ("7+5=12;12*3=36;36-4=32|A:32", True, "correct"),
    ("7+5=12;12*3=35!12*3=36;36-4=32|A:32", True, "correct"),  # a retry that fixes the slip
    ("7+5=12;12*3=35!12*3=35;35-4=31|A:31", False, "wrong value"),  # a retry that repeats it
    ("7+5=12;12*3=36;36-4=32|A:32~7+5=12;12*3=36", True, "correct"),  # rambling after the answer
    ("7+5=12|A:12 ... no: 12*3=36;36-4=32 Answer: 32", True, "correct"),  # the last answer counts
    ("7+5=12;12*3=36;36-4=32|A:32 then A:33", False, "wrong value"),
    ("Answer: 032", True, "correct"),
    ("A: +32", True, "correct"),
    ("7+5=12;12*3=36;36-4=32", False, "no answer found"),
    ("A: thirty-two", False, "no integer"),
    ("A:", False, "no integer"),
    ("A: 1" + "0" * 40, False, "more than"),
    ("A: 32" + "\x00" * 10, True, "correct"),
    ("DATA:32", False, "no answer found"),  # a marker must start a word
    ("", False, "no answer found"),
])
def test_verifier_by_hand(task, response, correct, reason):
    result = task.verify(response, RECORD)
    assert result.correct is correct and reason in result.reason, result


def test_verifier_is_total_on_hostile_output(task):
    rng = random.Random(0)
    alphabet = "0123456789+-*=;!|~A:Answer \n\x00é"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        result = task.verify(text, RECORD)
        assert result.reward in (0.0, 1.0)
    huge = "A:" * 50_000 + "9" * 100_000
    assert task.verify(huge, RECORD).correct is False


def test_votes_count_the_number_not_its_spelling(task):
    assert [task.vote_answer(a, RECORD) for a in ("32", "032", "+32", " 32 ", "-0", "x", None)] == \
        ["32", "32", "32", "32", "0", None, None]
    assert task.answers_match("032", "32") and not task.answers_match("32", "33")
    assert final_number("A: -3")[0] == "-3"


def test_step_validity_checks_each_step_and_retry():
    t = RunningTotalTask(train_size=10, eval_size=5)
    scores, chain = t.step_validity("7+5=12;12*3=35!12*3=36;36-4=32|A:32", RECORD)
    assert scores == [1.0, 0.0, 1.0, 1.0] and chain is False
    assert t.step_validity("7+5=12;12*3=36;36-4=32|A:32", RECORD) == ([1.0, 1.0, 1.0], True)


def test_held_out_by_construction(task):
    assert all(running_total_held_out(r) for r in task.heldout)
    other = RunningTotalTask(train_size=3000, eval_size=50, seed=5, sizes=(2, 3))
    train_questions = {r.question for r in [*task.train, *other.train]}
    assert not train_questions & {r.question for r in task.heldout}
    assert not any(running_total_held_out(r) for r in other.train)
    # the pool is a property of the problem: another seed's held-out problems are in it too
    assert all(running_total_held_out(r) for r in other.heldout)


def test_bad_config_names_the_key():
    with pytest.raises(TaskError, match="task.sizes"):
        RunningTotalTask(sizes=(0,))
    assert build_task("running_total", {"eval_size": 3}).heldout[0].source == "running_total"


def test_blind_spot_by_hand():
    assert BLIND_SPOT_MIN == 300
    assert blind_spot(43, "*", 7) == 281  # 301 with the carry of 3*7=21 forgotten
    assert blind_spot(40, "*", 9) is None  # no carry from the ones digit
    assert blind_spot(23, "*", 7) is None  # 161 is below the blind spot
    assert blind_spot(43, "+", 7) is None


def test_the_teacher_writes_the_designed_mix(task):
    rng = random.Random(0)
    totals = Counter()
    for record in task.train[:1500]:
        text, stats = teacher_solution(record.meta["start"], record.meta["steps"], rng)
        assert task.verify(text, record).correct is bool(stats["right"]), text
        totals.update(stats)
        totals["ramble"] += "~" in text
    # the designed mix is right 40.9% of the time over the build's 120,000 examples; on 1,500 the binomial sd is
    # 1.3 points, and the check allows five of them either side
    assert abs(totals["right"] / 1500 - 0.409) <= 5 * (0.409 * 0.591 / 1500) ** 0.5
    assert totals["checks"] and totals["fixed"] and totals["ramble"] and totals["slips"]
