"""A generative reward model as a verifiable task: the policy judges answers, and agreeing with the label pays.

Each problem shows a question and either two answers (`mode: pairwise`, one right and one wrong, in random
order) or one answer (`mode: pointwise`, right or wrong with probability 1/2). The policy may reason, then must
end with a verdict; the verifier gives 1 when the verdict agrees with the known label and 0 otherwise. This is
the rule-based RL formulation of Think-RM (arXiv:2505.16265), R1-Reward (arXiv:2505.02835) and DeepSeek-GRM's
SPCT (arXiv:2504.02495), which are therefore recipes of the ordinary trainer (recipes/think_rm.yaml,
r1_reward.yaml, grm_spct.yaml).

The data are the project's own, so it runs offline: `addition` problems, with right answers from the worked
solution and wrong ones from the same solver with slipped carries and digits (`worked_solution`), i.e. the
mistakes a careless solver (and the built-in model) makes.

Verdicts (`verdict`):
- `label`: `verdict_template` with `{label}` replaced by one of `labels`, e.g. `[[A]]` (Think-RM) or
  `\\boxed{1}` (R1-Reward). Every occurrence in the response is read: none, or two different labels, scores 0.
- `scores` (SPCT): `[[s]]` (pointwise) or `[[s_1, s_2]]` (pairwise), numbers in 1..10. Pairwise agrees when
  the right answer's score is strictly the highest; pointwise when (s >= score_threshold) matches the label.
"""

from __future__ import annotations

import random
import re
from typing import Annotated, Literal

from pydantic import Field

from rlvr.tasks.addition import AdditionTask, worked_solution
from rlvr.tasks.base import TASKS, LazySplit, Task, TaskError, VerifyResult
from rlvr.types import TaskRecord

_SCORES = re.compile(r"\[\[\s*([^\[\]]*?)\s*\]\]")
_NUMBER = re.compile(r"^[+-]?\d+(?:\.\d+)?$")


@TASKS.register("preference_judge")
class PreferenceJudgeTask(Task):
    """Judge answers to `addition` problems; the reward is agreement with the known preference/correctness."""

    name = "preference_judge"
    default_prompt_template = "{question}"
    default_chat_template = "{question}"

    def __init__(
        self,
        *,
        mode: Literal["pairwise", "pointwise"] = "pairwise",
        verdict: Literal["label", "scores"] = "label",
        verdict_template: str = "[[{label}]]",
        labels: Annotated[list[str] | None, Field(description="Pairwise: the two answers' names (default A, B); "
                                                  "pointwise: the right/wrong verdicts (default correct, "
                                                  "incorrect).")] = None,
        score_threshold: Annotated[float, Field(description="scores, pointwise: a score >= this says the "
                                                "answer is right")] = 6.0,
        answer_style: Annotated[Literal["final", "worked"], Field(description="final: only the number; worked: "
                                                                   "the column-by-column solution")] = "final",
        digits: tuple[int, int] = (2, 3),
        train_size: Annotated[int, Field(ge=1)] = 100_000,
        eval_size: Annotated[int, Field(ge=1)] = 200,
        seed: Annotated[int, Field(ge=0)] = 0,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
    ):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        self.mode, self.verdict, self.answer_style, self.seed = mode, verdict, answer_style, seed
        self.labels = list(labels) if labels is not None else (["A", "B"] if mode == "pairwise"
                                                               else ["correct", "incorrect"])
        if len(self.labels) != 2 or len(set(self.labels)) != 2 or not all(s.strip() for s in self.labels):
            raise TaskError(f"task.labels: expected two different non-empty labels; got {self.labels}")
        if verdict == "label" and "{label}" not in verdict_template:
            raise TaskError(f"task.verdict_template: must contain '{{label}}'; got {verdict_template!r}")
        self.verdict_template = verdict_template
        self.score_threshold = score_threshold
        self._label_re = re.compile("|".join(
            re.escape(verdict_template.replace("{label}", label)) for label in self.labels))
        source = AdditionTask(digits=digits, train_size=train_size, eval_size=eval_size, seed=seed)
        self._heldout = [self._judge_record(r) for r in source.heldout]
        self._train = LazySplit(train_size, lambda i, attempt: self._judge_record(source.train[i]))

    # -- data ---------------------------------------------------------------------------------------------

    def _answers(self, record: TaskRecord, rng: random.Random) -> tuple[str, str]:
        """(right answer, wrong answer) in `answer_style`: the wrong one is a careless solver's slip."""
        a, b = record.meta["a"], record.meta["b"]
        right, _ = worked_solution(a, b)
        wrong = None
        for _ in range(50):
            text, ok = worked_solution(a, b, rng=rng, carry_slip=0.5, digit_slip=0.3)
            if not ok:
                wrong = text
                break
        if wrong is None:  # no carry to drop and the slips missed: change the last digit instead
            bad = a + b + rng.choice((-1, 1)) if a + b > 0 else 1
            wrong = f"A:{bad}"
        if self.answer_style == "final":
            return right.rsplit("A:", 1)[1], wrong.rsplit("A:", 1)[1]
        return right, wrong

    def _verdict_text(self, label: str) -> str:
        return self.verdict_template.replace("{label}", label)

    def _judge_record(self, source: TaskRecord) -> TaskRecord:
        rng = random.Random(f"preference_judge-{self.seed}-{source.id}")
        right, wrong = self._answers(source, rng)
        q = source.question
        if self.mode == "pairwise":
            right_first = rng.random() < 0.5
            shown = [right, wrong] if right_first else [wrong, right]
            gold = self.labels[0] if right_first else self.labels[1]
            answers = "".join(f"Answer {label}: {text}\n" for label, text in zip(self.labels, shown))
            if self.verdict == "label":
                ask = (f"Which answer is correct? Finish with {self._verdict_text(self.labels[0])} or "
                       f"{self._verdict_text(self.labels[1])}.")
            else:
                ask = "Rate each answer from 1 to 10, then finish with [[score 1, score 2]]."
            correct = [right_first, not right_first]
        else:
            is_right = rng.random() < 0.5
            shown = [right if is_right else wrong]
            gold = self.labels[0] if is_right else self.labels[1]
            answers = f"Answer: {shown[0]}\n"
            if self.verdict == "label":
                ask = (f"Is the answer correct? Finish with {self._verdict_text(self.labels[0])} or "
                       f"{self._verdict_text(self.labels[1])}.")
            else:
                ask = "Rate the answer from 1 to 10, then finish with [[score]]."
            correct = [is_right]
        question = f"Question: {q}\n{answers}{ask}\n"
        return TaskRecord(id=f"judge-{source.id}", question=question, answer=gold, difficulty=source.difficulty,
                          source="preference_judge", meta={"a": source.meta["a"], "b": source.meta["b"],
                                                           "mode": self.mode, "answers": shown,
                                                           "answers_correct": correct})

    # -- verifier -----------------------------------------------------------------------------------------

    def extract_answer(self, response: str) -> str | None:
        """The single verdict in `response` (a label, or the scores as text), or None (no or conflicting)."""
        verdict, _ = self._read_verdict(response)
        return verdict

    def answers_match(self, a: str, b: str) -> bool:
        return a.strip() == b.strip()

    def _read_verdict(self, response: str) -> tuple[str | None, str]:
        if not isinstance(response, str) or not response.strip():
            return None, "empty response: no verdict"
        if self.verdict == "label":
            found = {m.group(0) for m in self._label_re.finditer(response)}
            names = [label for label in self.labels if self._verdict_text(label) in found]
            if not names:
                return None, (f"no verdict: expected {self._verdict_text(self.labels[0])} or "
                              f"{self._verdict_text(self.labels[1])}")
            if len(names) > 1:
                return None, f"conflicting verdicts: both {names[0]} and {names[1]}"
            return names[0], f"verdict {names[0]}"
        groups = {" ".join(m.group(1).replace(",", " ").split()) for m in _SCORES.finditer(response)}
        if not groups:
            return None, "no verdict: expected [[scores]]"
        if len(groups) > 1:
            return None, f"conflicting verdicts: {sorted(groups)}"
        return groups.pop(), "scores"

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        verdict, reason = self._read_verdict(response)
        if verdict is None:
            return VerifyResult(0.0, False, reason)
        gold = str(record.answer)
        if self.verdict == "label":
            agrees = verdict == gold
            return VerifyResult(float(agrees), agrees, f"agrees with the label {gold}" if agrees else
                                f"disagrees: said {verdict}, the label is {gold}", verdict)
        parts = verdict.split()
        expected = 2 if self.mode == "pairwise" else 1
        if len(parts) != expected or not all(_NUMBER.match(p) for p in parts):
            return VerifyResult(0.0, False, f"scores {verdict!r}: expected {expected} number(s)", verdict)
        scores = [float(p) for p in parts]
        if not all(1.0 <= s <= 10.0 for s in scores):
            return VerifyResult(0.0, False, f"scores {verdict!r}: each must lie in 1..10", verdict)
        if self.mode == "pairwise":
            best = self.labels.index(gold)
            agrees = scores[best] > scores[1 - best]  # SPCT: the preferred answer strictly highest
        else:
            agrees = (scores[0] >= self.score_threshold) == (gold == self.labels[0])
        return VerifyResult(float(agrees), agrees, f"scores {verdict} {'agree' if agrees else 'disagree'} "
                            f"with the label {gold}", verdict)
