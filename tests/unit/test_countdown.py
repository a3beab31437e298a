"""The lab task's verifier by hand values, its parser against hostile input, and its problem generator."""

from __future__ import annotations

from fractions import Fraction

import pytest

from rlvr.tasks import build_task
from rlvr.tasks.base import TaskError
from rlvr.tasks.countdown import (
    MAX_EXPRESSION_CHARS,
    CountdownTask,
    ExpressionError,
    chain_solutions,
    chain_text,
    check_expression,
    evaluate_expression,
    final_expression,
)
from rlvr.types import TaskRecord


def record(numbers, target):
    return TaskRecord(id="t", question=" ".join(map(str, numbers)) + f" -> {target}", answer=str(target),
                      meta={"numbers": list(numbers), "target": target})


TASK = CountdownTask(eval_size=20, train_size=100)


@pytest.mark.parametrize("response, correct, reason", [
    ("A: (7*5-12)+3", False, "wrong value: the expression makes 26, the target is 31"),
    ("A: 7*5-12+3+5", False, "not available: 5"),
    ("Answer: (12-7)*5+3", False, "wrong value: the expression makes 28"),
    ("A: 3*12-5", False, "unused: 7"),
])
def test_wrong_answers_by_hand(response, correct, reason):
    r = record([3, 7, 12, 5], 31)
    got = TASK.verify(response, r)
    assert got.correct is correct and got.reward == 0.0
    assert reason.split(":")[0] in got.reason


def test_right_answers_by_hand():
    r = record([3, 7, 12, 5], 31)
    # 5*7 - 12/3 = 35 - 4 = 31, each number once
    ok = TASK.verify("5*7=35;12/3=4;35-4=31|A:5*7-12/3", r)
    assert ok.correct and ok.reward == 1.0 and ok.extracted == "5*7-12/3"
    assert TASK.verify("scratch\nAnswer: (5 * 7) - (12 / 3)", r).correct
    # Only the last answer line is graded: a right answer followed by a wrong one scores 0.
    assert not TASK.verify("A: 5*7-12/3 | A: 5*7-12-3", r).correct
    assert TASK.verify("A: 5*7-12-3 | A: 5*7-12/3", r).correct


def test_exact_rational_arithmetic():
    # 8 / (3 - 8/3) = 24: needs fractions in the middle (the classic 24-game card)
    assert evaluate_expression("8/(3-8/3)")[0] == Fraction(24)
    assert check_expression("8/(3-8/3)", [8, 3, 8, 3], 24) == (True, "correct")
    # a result that is not an integer is not the integer target
    ok, reason = check_expression("7/2", [7, 2], 3)
    assert not ok and "7/2" in reason


def test_division_by_zero():
    ok, reason = check_expression("5/(3-3)+1", [5, 3, 3, 1], 6)
    assert not ok and reason == "invalid expression: division by zero"


def test_numbers_used_twice_or_not_given():
    ok, reason = check_expression("5*5+1", [5, 1, 2], 26)
    assert not ok and "not available: 5" in reason and "unused: 2" in reason
    ok, reason = check_expression("12+7", [1, 2, 7], 19)  # digits 1 and 2 are given, the number 12 is not
    assert not ok and "not available: 12" in reason


def test_repeated_numbers_count_as_a_multiset():
    assert check_expression("3*3+1", [3, 1, 3], 10) == (True, "correct")
    ok, _ = check_expression("3*3*3+1", [3, 1, 3], 28)
    assert not ok


@pytest.mark.parametrize("expression, why", [
    ("", "empty expression"),
    ("-3+5", "unary signs are not allowed"),
    ("3+", "ends too early"),
    ("(3+5", "unbalanced"),
    ("3+5)", "after a complete expression"),
    ("3 5", "after a complete expression"),
    ("3**5", "expected a number"),
    ("__import__('os')", "unexpected character"),
    ("3.5+1", "unexpected character '.'"),
    ("1e9", "unexpected character 'e'"),
    ("9999999*1", "too long"),
])
def test_malformed_answers_are_rejected_with_a_reason(expression, why):
    with pytest.raises(ExpressionError, match=why.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        evaluate_expression(expression)


def test_hostile_sizes_are_bounded():
    deep = "(" * 40 + "1" + ")" * 40
    with pytest.raises(ExpressionError, match="nested deeper"):
        evaluate_expression(deep)
    with pytest.raises(ExpressionError, match="longer than"):
        evaluate_expression("1+" * MAX_EXPRESSION_CHARS + "1")
    # the target reached by a malformed answer is still 0: trailing junk after a right expression
    r = record([4, 6], 10)
    assert not TASK.verify("A: 4+6)", r).correct
    assert not TASK.verify("A: 4+6+", r).correct
    assert not TASK.verify("the answer is 10", r).correct  # no answer line
    assert TASK.verify("A: 4+6.", r).correct  # a sentence's full stop is not part of the expression


def test_final_expression_takes_the_last_marker_and_its_line():
    assert final_expression("A: 1+2\nmore text\nAnswer: 3*4\nbye") == "3*4"
    assert final_expression("no marker") is None


def test_chain_solutions_and_worked_text_agree_with_the_verifier():
    numbers, target = [3, 7, 12, 5], 31
    sols = list(chain_solutions(numbers, target))
    assert sols == [((5, 3, 12, 7), ("-", "*", "+"))]  # (5-3)*12+7 = 31, the only left-to-right chain

    r = record(numbers, target)
    for order, ops in sols:
        text, value = chain_text(order, ops)
        assert value == target and TASK.verify(text, r).correct, text
    # a chain that leaves the positive integers stops there and is not an answer
    text, value = chain_text([3, 7], ["-"])
    assert value is None and "A:" not in text


def test_generator_is_seeded_split_apart_and_solvable():
    a, b = CountdownTask(eval_size=50, train_size=200), CountdownTask(eval_size=50, train_size=200)
    assert [r.question for r in a.heldout] == [r.question for r in b.heldout]
    held = {r.question for r in a.heldout}
    assert not held & {a.train[i].question for i in range(200)}
    other = CountdownTask(eval_size=50, train_size=200, seed=1)
    assert [r.question for r in other.heldout] != [r.question for r in a.heldout]
    for r in a.heldout:
        nums, target = r.meta["numbers"], r.meta["target"]
        assert r.difficulty == len(nums) in (3, 4) and 1 <= target <= 100
        assert r.question == " ".join(map(str, nums)) + f" -> {target}"
    # A chain-shaped problem has a chain solution; a pair-shaped one (pair_only) has none, by construction.
    shapes = {r.meta["shape"] for r in a.heldout}
    assert shapes == {"chain", "pair"}
    for r in a.heldout:
        has_chain = next(chain_solutions(r.meta["numbers"], r.meta["target"]), None) is not None
        assert has_chain == (r.meta["shape"] == "chain"), r.question
    # pair_only=False draws pair-shaped targets of any kind (the lab model's SFT data was drawn so)
    loose = CountdownTask(eval_size=50, train_size=200, pair_only=False)
    assert [r.question for r in loose.heldout] != [r.question for r in a.heldout]


def test_registered_and_bad_config_names_the_key():
    task = build_task("countdown", {"eval_size": 10})
    assert task.name == "countdown" and len(task.heldout) == 10
    with pytest.raises(TaskError, match="task.sizes"):
        CountdownTask(sizes=(1,))


def test_step_validity_checks_arithmetic_and_number_use():
    r = record([3, 7, 12, 5], 31)
    good = "5*7=35;12/3=4;35-4=31|A:5*7-12/3"
    scores, chain = TASK.step_validity(good, r)
    # the second step starts a new pair (12/3), not the running value: a chain scratchpad marks it invalid
    assert scores[0] == 1.0 and not chain
    scores, chain = TASK.step_validity("7*5=35;35-12=23;23+3=26|A:((7*5)-12)+3", r)
    assert scores == [1.0, 1.0, 1.0] and not chain  # valid steps, wrong target
    scores, _ = TASK.step_validity("7*5=36;36-12=24|A:(7*5)-12", r)
    assert scores == [0.0, 1.0]


# -- the vote counts values, not written expressions (TTRL, maj@k) -------------------------------------------


def test_vote_answer_is_the_value_of_a_well_formed_expression_over_the_given_numbers():
    from rlvr.tasks.countdown import CountdownTask
    from rlvr.types import TaskRecord

    task = CountdownTask(eval_size=5)
    rec = TaskRecord(id="x", question="3 5 7 12 -> 31", answer="31",
                     meta={"numbers": [3, 5, 7, 12], "target": 31})
    assert task.vote_answer("((7*5)-12)+3", rec) == "26"
    assert task.vote_answer("(12+7)+(3*5)", rec) == task.vote_answer("3*5+12+7", rec) == "34"
    assert task.vote_answer("(7*5-3)-12/12", rec) is None  # 12 used twice, not all numbers once
    assert task.vote_answer("12/(7-7)+3+5", rec) is None
    assert task.vote_answer("(3+5)*7/12", rec) == "14/3"
    assert task.vote_answer("__import__('os')", rec) is None
    assert task.vote_answer("(" * 5000 + "3" + ")" * 5000, rec) is None
    assert task.vote_answer(None, rec) is None


def test_a_right_majority_rewards_every_right_expression_and_its_label_is_the_target():
    from rlvr.rewards.label_free.voting import MajorityVoteReward
    from rlvr.tasks.countdown import CountdownTask
    from rlvr.types import Group, Sample, TaskRecord

    task = CountdownTask(eval_size=5)
    rec = TaskRecord(id="x", question="2 3 4 -> 20", answer="20", meta={"numbers": [2, 3, 4], "target": 20})
    texts = ["A:(2+3)*4", "A:4*(3+2)", "A:(3+2)*4", "A:2*3+4", "A:2*3*4"]
    group = Group(record=rec, prompt_ids=[], samples=[Sample(prompt_ids=[], response_ids=[], text=t) for t in texts])
    reward = MajorityVoteReward()
    out = reward(group, task)
    assert [o.value for o in out] == [1.0, 1.0, 1.0, 0.0, 0.0]  # three different right expressions, one vote
    m = reward.metrics()
    assert m["label_accuracy"] == 1.0 and m["reward_accuracy"] == 1.0
