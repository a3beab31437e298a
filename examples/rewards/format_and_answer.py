"""A reward function of your own, scoring format and correctness: one line of config, no launcher.

    rlvr train recipes/grpo.yaml 'rewards=[{name: python, function: examples/rewards/format_and_answer.py:score}]'

rlvr calls `score(response, record)` for every sampled response (in its verifier worker processes, each call
under a timeout). `record` is the task's problem (record.question, record.answer). The returned dict's
`reward` is the sample's reward; `correct` sets its correctness (accuracy); the other keys are components,
logged each step as reward/python/format and reward/python/answer.
"""

import re

# the built-in addition task's scratchpad: column steps separated by '|', then 'A:<number>'
SCRATCHPAD = re.compile(r"^(\d\+\d(\+1)?=\d+;\d+\|)+A:(\d+)\s*$")


def score(response, record):
    match = SCRATCHPAD.match(response.strip())
    well_formed = match is not None
    right = well_formed and match.group(3) == str(record.answer)
    return {
        "reward": 0.2 * well_formed + 0.8 * right,
        "format": float(well_formed),
        "answer": float(right),
        "correct": right,
        "reason": "correct" if right else ("wrong answer" if well_formed else "not a scratchpad"),
    }
