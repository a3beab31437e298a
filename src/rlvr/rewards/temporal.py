"""Video-R1's T-GRPO temporal contrast reward: correct answers earn a bonus only when the policy does better on
a clip's frames in time order than on the same frames shuffled."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rlvr.rewards.base import REWARDS, RewardOutput
from rlvr.types import Group


def temporal_bonus(ordered_correct: list[bool], shuffled_correct: list[bool], alpha: float) -> tuple[list[float], bool]:
    r"""T-GRPO's rule for one prompt. With p the correct rate of the group on ordered frames and p~ on shuffled:

        r_t = alpha  if p > p~,  else 0
        R_i = r_t for a correct ordered response, 0 for a wrong one   (added to the accuracy reward)

    Returns (R_i per ordered response, whether the bonus was granted). Ties (p = p~) earn nothing.
    """
    if not ordered_correct:
        return [], False
    p = sum(ordered_correct) / len(ordered_correct)
    p_shuffled = sum(shuffled_correct) / len(shuffled_correct) if shuffled_correct else 0.0
    granted = bool(shuffled_correct) and p > p_shuffled
    return [alpha if (granted and c) else 0.0 for c in ordered_correct], granted


@REWARDS.register("t_grpo")
class TemporalContrastReward:
    r"""T-GRPO: the temporal contrast reward (see `temporal_bonus`).

    The trainer also samples every prompt with its clip's frames shuffled (`task.shuffle_frames`, a permutation
    other than the original, the same question and answer) when a component asks for it
    (`needs_shuffled_frames`); this component pairs each group with its shuffled twin, compares their correct
    rates by the task's verifier, and gives correct ordered responses alpha when the ordered group wins. The
    shuffled groups are only a contrast: the trainer drops them before the update, and here they score 0.
    Combine it with `correctness` (weight 1) for R_i = r_acc_i + r_t. A prompt without a clip (no twin) gets no
    bonus. Metrics: `granted_frac` (prompts with p > p~), `p_ordered`, `p_shuffled`. Source: Feng et al.,
    "Video-R1: Reinforcing Video Reasoning in MLLMs", arXiv:2503.21776, eq. 1 (alpha = 0.3 there).
    """

    needs_shuffled_frames = True

    def __init__(self, *, alpha: Annotated[float, Field(ge=0)] = 0.3):
        self.alpha = alpha
        self._reset()

    def _reset(self) -> None:
        self.prompts = self.granted = self.unpaired = 0
        self.p_sum = self.p_shuffled_sum = 0.0

    def score_batch(self, groups: list[Group], task: Any) -> list[list[RewardOutput]]:
        shuffled = {g.record.meta["shuffled_of"]: g for g in groups if g.record.meta.get("shuffled_of")}
        out = []
        for g in groups:
            if g.record.meta.get("shuffled_of"):
                out.append([RewardOutput(0.0, "shuffled frames: contrast only, not trained on") for _ in g.samples])
                continue
            ordered = _correct(g, task)
            twin = shuffled.get(g.record.id)
            self.prompts += 1
            if twin is None:
                self.unpaired += 1
                out.append([RewardOutput(0.0, "no shuffled twin (no clip): no temporal bonus") for _ in g.samples])
                continue
            mixed = _correct(twin, task)
            values, granted = temporal_bonus(ordered, mixed, self.alpha)
            p, p_mixed = sum(ordered) / len(ordered), sum(mixed) / max(len(mixed), 1)
            self.granted += int(granted)
            self.p_sum += p
            self.p_shuffled_sum += p_mixed
            why = f"ordered {p:.2f} {'>' if granted else '<='} shuffled {p_mixed:.2f}"
            out.append([RewardOutput(v, why) for v in values])
        return out

    def metrics(self) -> dict[str, float]:
        paired = self.prompts - self.unpaired
        m = {"unpaired_frac": self.unpaired / max(self.prompts, 1)}
        if paired:
            m.update(granted_frac=self.granted / paired, p_ordered=self.p_sum / paired,
                     p_shuffled=self.p_shuffled_sum / paired)
        self._reset()
        return m


def _correct(group: Group, task: Any) -> list[bool]:
    out = []
    for s in group.samples:
        try:
            out.append(bool(task.verify(s.text, group.record).correct))
        except Exception:
            out.append(False)
    return out
