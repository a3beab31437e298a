"""A reward for a real instruction-tuned model: its final answer, compared with the reference as a number.

    rlvr train examples/recipes/own_model_gpu.yaml model.path=/path/to/Qwen2.5-0.5B-Instruct \
        'rewards=[{name: python, function: examples/rewards/final_answer.py:score}]'

A chat model writes its reasoning, then an answer in one of a few forms: `\\boxed{42}`, `Answer: 42`,
`The answer is 42.` The last of these in the response is its final answer (an earlier one may be a draft it
corrected). The reward is 1 when that number equals the reference (`record.answer`), with a small credit for
giving an answer in a recognisable form at all; `correct` feeds the run's accuracy.
"""

import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
STATED = re.compile(r"(?:answer\s*(?:is|:)\s*)\$?(-?[\d,]*\.?\d+)", re.IGNORECASE)
NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def final_answer(response: str):
    """The last boxed or stated answer in the response, as text; None when there is none."""
    found = [(m.start(), m.group(1)) for m in BOXED.finditer(response)]
    found += [(m.start(), m.group(1)) for m in STATED.finditer(response)]
    return max(found)[1].strip() if found else None


def as_number(text):
    match = NUMBER.search(text.replace(" ", "")) if text else None
    if match is None:
        return None
    try:
        return float(match.group(0).replace(",", ""))
    except ValueError:
        return None


def score(response, record):
    answer = final_answer(response)
    value, reference = as_number(answer), as_number(str(record.answer))
    right = value is not None and reference is not None and abs(value - reference) < 1e-9
    return {
        "reward": 0.1 * (answer is not None) + 0.9 * right,
        "answered": float(answer is not None),
        "correct": right,
        "reason": "correct" if right else ("no final answer" if answer is None else f"answered {answer}"),
    }
