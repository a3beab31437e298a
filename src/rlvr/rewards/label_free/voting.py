"""Majority-vote label-free rewards: TTRL (the majority answer as a pseudo-label) and TTRV (the answer's
frequency plus a low-entropy bonus). Shared here: answer clustering and the pseudo-label quality statistics."""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import Field

from rlvr.rewards.base import REWARDS, RewardOutput
from rlvr.types import Group, TaskRecord

log = logging.getLogger(__name__)


def answer_clusters(answers: list[str | None], task: Any) -> list[int | None]:
    """Cluster index per answer (None for no answer); equal answers per `task.answers_match` share one."""
    reps: list[str] = []
    out: list[int | None] = []
    for a in answers:
        if a is None:
            out.append(None)
            continue
        for k, r in enumerate(reps):
            try:
                same = task.answers_match(a, r)
            except Exception:
                same = a == r
            if same:
                out.append(k)
                break
        else:
            reps.append(a)
            out.append(len(reps) - 1)
    return out


def majority(answers: list[str | None], task: Any) -> tuple[list[int | None], int | None, list[int]]:
    """(cluster of each answer, the majority cluster or None, cluster sizes). Ties go to the earliest seen."""
    clusters = answer_clusters(answers, task)
    counts = Counter(c for c in clusters if c is not None)
    sizes = [counts[k] for k in range(len(counts))]
    if not counts:
        return clusters, None, sizes
    best = max(range(len(sizes)), key=lambda k: (sizes[k], -k))
    return clusters, best, sizes


def extract_all(group: Group, task: Any) -> list[str | None]:
    """Each sample's answer as a vote counts it: extracted, then put in the task's canonical form
    (`Task.vote_answer`; e.g. countdown's value of a well-formed expression)."""
    vote = getattr(task, "vote_answer", None)
    out = []
    for s in group.samples:
        try:
            answer = task.extract_answer(s.text)
            out.append(vote(answer, group.record) if vote is not None else answer)
        except Exception:
            out.append(None)
    return out


def _label_is_right(label: str | None, record: TaskRecord, task: Any) -> bool | None:
    """Whether a pseudo-label equals the reference answer; None when there is no reference."""
    if record.answer is None or label is None:
        return None if record.answer is None else False
    try:
        return bool(task.answers_match(label, str(record.answer)))
    except Exception:
        return False


class LabelStats:
    """Per-step statistics of pseudo-labels against references (when the task has them)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.groups = 0
        self.labels_right = 0
        self.labelled_groups = 0
        self.rewards_right = 0
        self.rewards_scored = 0

    def add(self, group: Group, task: Any, label: str | None, rewards: list[float], threshold: float = 0.5) -> None:
        self.groups += 1
        right = _label_is_right(label, group.record, task)
        if right is None:
            return
        self.labelled_groups += 1
        self.labels_right += int(right)
        for s, r in zip(group.samples, rewards):
            try:
                truth = bool(task.verify(s.text, group.record).correct)
            except Exception:
                continue
            self.rewards_scored += 1
            self.rewards_right += int((r > threshold) == truth)

    def metrics(self) -> dict[str, float]:
        if not self.labelled_groups:
            return {}
        return {"label_accuracy": self.labels_right / self.labelled_groups,
                "maj_accuracy": self.labels_right / self.labelled_groups,
                "reward_accuracy": self.rewards_right / max(self.rewards_scored, 1)}


@REWARDS.register("ttrl")
class MajorityVoteReward:
    r"""TTRL: the group's majority-voted answer becomes the pseudo-label.

        R_i = 1 if answer_i matches the majority answer of its group, else 0   (no answer: 0)

    Metrics (when references exist): `label_accuracy` = fraction of groups whose majority answer is right
    (this is maj@n of the n samples), `reward_accuracy` = fraction of samples whose pseudo-reward equals the
    true reward. Source: Zuo et al., "TTRL: Test-Time Reinforcement Learning", arXiv:2504.16084.
    """

    def __init__(self) -> None:
        self.stats = LabelStats()

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        answers = extract_all(group, task)
        clusters, best, sizes = majority(answers, task)
        label = answers[clusters.index(best)] if best is not None else None
        out = [RewardOutput(1.0 if c is not None and c == best else 0.0,
                            f"majority answer {label!r} ({sizes[best] if best is not None else 0}/{len(answers)})")
               for c in clusters]
        self.stats.add(group, task, label, [o.value for o in out])
        return out

    def metrics(self) -> dict[str, float]:
        m = self.stats.metrics()
        self.stats.reset()
        return m


@REWARDS.register("ttrv")
class FrequencyEntropyReward:
    r"""TTRV: a frequency reward plus a reward for a low-entropy answer distribution.

    With p_hat(a) the empirical frequency of answer a among the group's n samples and H = -sum_a p_hat(a) log p_hat(a):

        r1_i = p_hat(a_i)                   (frequency reward; 0 for a response without an answer)
        r2   = -H                           (diversity control: the same for every sample of the group)

    How r2 is applied so that group normalization does not cancel it: a term that is constant within a group
    vanishes from (r - mean_group) / std_group. Since -H = mean_i log p_hat(a_i) over the group's samples,
    `entropy_mode: per_sample` (the default) gives each sample its own share, r2_i = log p_hat(a_i): the group mean
    of r2_i is exactly -H, and samples that keep the distribution peaked (common answers) get more than those that
    spread it, so the term survives normalization and pushes entropy down. `entropy_mode: group` adds the constant
    -H to every sample, as written in the paper; that only matters with estimators that do not subtract a group
    mean. Unanswered samples count as their own singleton answers in H.

        R_i = r1_i + alpha * r2_i

    Source: Singh et al., "TTRV: Test-Time Reinforcement Learning for Vision Language Models", arXiv:2510.06783.
    """

    def __init__(self, *, alpha: Annotated[float, Field(ge=0)] = 0.5,
                 entropy_mode: Literal["per_sample", "group"] = "per_sample"):
        self.alpha, self.entropy_mode = alpha, entropy_mode
        self.stats = LabelStats()

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        answers = extract_all(group, task)
        clusters, best, sizes = majority(answers, task)
        n = len(answers)
        # unanswered responses are singletons of their own for the entropy
        probs = [sizes[c] / n if c is not None else 1.0 / n for c in clusters]
        entropy = -sum(math.log(p) for p in probs) / n  # = -sum_a p_hat(a) log p_hat(a)
        out = []
        for c, p in zip(clusters, probs):
            r1 = p if c is not None else 0.0
            r2 = math.log(p) if self.entropy_mode == "per_sample" else -entropy
            out.append(RewardOutput(r1 + self.alpha * r2, f"frequency {p:.2f}, answer entropy {entropy:.2f}"))
        label = answers[clusters.index(best)] if best is not None else None
        self.stats.add(group, task, label, [1.0 if c == best else 0.0 for c in clusters])
        return out

    def metrics(self) -> dict[str, float]:
        m = self.stats.metrics()
        self.stats.reset()
        return m
