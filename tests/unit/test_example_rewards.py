"""examples/rewards/final_answer.py: a real chat model's final answer, read adversarially."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("final_answer", ROOT / "examples" / "rewards" / "final_answer.py")
final_answer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(final_answer)


@pytest.mark.parametrize("response, expected, reward", [
    ("23*4 = 92, 92-17 = 75. The answer is 75.", "75", 1.0),
    ("First \\boxed{74}... no, recount: \\boxed{75}", "75", 1.0),  # the last answer counts
    ("\\boxed{75} but wait, the answer is 76", "76", 0.1),
    ("Answer: 1,075", "1,075", 0.1),  # a wrong number with a thousands separator
    ("Answer: 75.0", "75.0", 1.0),
    ("I believe it is 75", None, 0.0),  # no recognisable final answer
    ("", None, 0.0),
    ("The answer is \\boxed{}", "", 0.1),  # an empty box: an answer form, no number
])
def test_final_answer_and_reward(response, expected, reward):
    assert final_answer.final_answer(response) == expected
    out = final_answer.score(response, SimpleNamespace(answer="75"))
    assert out["reward"] == pytest.approx(reward)
    assert out["correct"] == (reward == 1.0)


def test_hostile_responses_score_zero_quickly():
    huge = "9" * 100_000
    out = final_answer.score("Answer: " + huge, SimpleNamespace(answer="75"))
    assert out["correct"] is False
    assert final_answer.score("\\boxed{" * 10_000, SimpleNamespace(answer="75"))["reward"] == 0.0
