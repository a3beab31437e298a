"""scripts/build_lab_model.py: the teachers' solutions (the student's mix and the right-only lab teacher)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from build_lab_model import pair_solutions, pair_text, right_solution  # noqa: E402

from rlvr.tasks.countdown import CountdownTask, check_expression  # noqa: E402


def test_pair_solutions_by_hand():
    # 2 3 4 5 -> 14: 4*5 - 2*3 = 14 and 5+3 + 4+2 = 14; 2*5 + 3+4 = 17 is not one
    sols = {pair_text(o, ops).split("|A:")[1] for o, ops in pair_solutions([2, 3, 4, 5], 14)}
    assert "(4*5)-(2*3)" in sols and "(5+3)+(4+2)" in sols and "(2*5)+(3+4)" not in sols
    for expression in sols:
        assert check_expression(expression, [2, 3, 4, 5], 14) == (True, "correct")
    assert pair_solutions([1, 2, 3], 6) == []  # three numbers have no pair shape


def test_pair_text_shows_both_pairs_then_their_combination():
    assert pair_text((2, 5, 4, 3), ("+", "*", "-")) == "2+5=7;4-3=1;7*1=7|A:(2+5)*(4-3)"


def test_the_right_only_teacher_is_always_right_and_writes_every_shape():
    task = CountdownTask(pair_only=False, eval_size=20)
    rng = random.Random(0)
    styles = set()
    for i in range(400):
        record = task.train[i]
        text, style = right_solution(record.meta["numbers"], record.meta["target"], rng)
        assert task.verify(text, record).correct, (record.question, text)
        styles.add(style)
    assert styles == {"chain", "chain_div", "pair"}
