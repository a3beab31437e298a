"""Co-Reward: a prompt and its paraphrase vote for each other's pseudo-labels (cross-view agreement)."""

from __future__ import annotations

from typing import Any

from rlvr.rewards.base import REWARDS, RewardOutput
from rlvr.rewards.label_free.voting import LabelStats, extract_all, majority
from rlvr.types import Group

# -- Co-Reward -------------------------------------------------------------------------------------------


@REWARDS.register("co_reward")
class CrossAgreementReward:
    r"""Co-Reward: each question is paired with a paraphrase (same answer); the majority answer of one
    member's samples is the pseudo-label for the other's, and vice versa.

        R_i = 1 if answer_i matches the majority answer of the paired group, else 0

    The trainer adds each sampled prompt's paraphrase to the batch (`Task.paraphrase`, e.g. b+a for a+b) when
    a component asks for them. A group whose partner is missing falls back to its own majority (TTRL).
    Source: Zhang et al., "Co-Reward: Self-supervised Reinforcement Learning for Large Language Model Reasoning
    via Contrastive Agreement", arXiv:2508.00410.
    """

    needs_paraphrases = True

    def __init__(self) -> None:
        self.stats = LabelStats()
        self.unpaired = 0
        self.groups = 0

    def score_batch(self, groups: list[Group], task: Any) -> list[list[RewardOutput]]:
        by_id = {g.record.id: g for g in groups}
        votes = {}
        for g in groups:
            answers = extract_all(g, task)
            clusters, best, _ = majority(answers, task)
            votes[g.record.id] = (answers, answers[clusters.index(best)] if best is not None else None)
        out = []
        for g in groups:
            own_answers, own_label = votes[g.record.id]
            partner_id = g.record.meta.get("paraphrase_of") or f"{g.record.id}-swap"
            partner = by_id.get(partner_id)
            if partner is None:
                partner = next((h for h in groups if h.record.meta.get("paraphrase_of") == g.record.id), None)
            self.groups += 1
            label = votes[partner.record.id][1] if partner is not None else own_label
            self.unpaired += int(partner is None)
            rewards = []
            for a in own_answers:
                hit = a is not None and label is not None and _safe_match(task, a, label)
                rewards.append(RewardOutput(float(hit), f"paired majority {label!r}"))
            self.stats.add(g, task, label, [r.value for r in rewards])
            out.append(rewards)
        return out

    def metrics(self) -> dict[str, float]:
        m = {**self.stats.metrics(), "unpaired_frac": self.unpaired / max(self.groups, 1)}
        self.stats.reset()
        self.unpaired = self.groups = 0
        return m


def _safe_match(task: Any, a: str, b: str) -> bool:
    try:
        return bool(task.answers_match(a, b))
    except Exception:
        return a == b
