"""Rollout samples for the HTML report: `RolloutWriter` keeps a few prompts and responses per step in
RUN_DIR/rollouts.jsonl, and `read_rollouts` reads them back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.tracking.jsonl import _jsonable, truncate_jsonl

ROLLOUTS_FILE = "rollouts.jsonl"


class RolloutWriter:
    """Stores some of each step's samples in RUN_DIR/rollouts.jsonl, one JSON object per sample:

        step, group (index of the prompt within the step), sample (index within its group), prompt_id,
        prompt, response, reward, rewards {component: value}, reasons {component: reason}, correct,
        advantage (float, or one float per response token), finish_reason, length (response tokens),
        policy_version, answer (the reference answer, as text), difficulty

    It writes on steps divisible by `every` (0 switches it off), taking whole groups in order until
    `max_per_step` samples are stored, so advantages can be read against the rest of their group. Texts are
    cut at `max_chars`. On resume, lines after the checkpoint's step are dropped.
    """

    def __init__(self, run_dir: Path, every: int, max_per_step: int, *, resume_from_step: int | None = None,
                 max_chars: int = 20_000):
        if every < 0 or max_per_step < 0:
            raise ValueError(f"every and max_per_step must be >= 0; got {every}, {max_per_step}")
        self.path = Path(run_dir) / ROLLOUTS_FILE
        self.every, self.max_per_step, self.max_chars = every, max_per_step, max_chars
        if resume_from_step is not None:
            truncate_jsonl(self.path, resume_from_step)

    def write(self, step: int, groups: Sequence[Any]) -> int:
        """Store this step's samples if it is one to store. Returns how many were written."""
        if not self.every or not self.max_per_step or step % self.every:
            return 0
        lines = []
        for gi, group in enumerate(groups):
            for si, sample in enumerate(group.samples):
                if len(lines) >= self.max_per_step:
                    break
                lines.append(json.dumps(self.record(step, gi, si, group, sample), default=str,
                                        ensure_ascii=False))
            if len(lines) >= self.max_per_step:
                break
        with self.path.open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        return len(lines)

    def record(self, step: int, gi: int, si: int, group: Any, sample: Any) -> dict[str, Any]:
        adv = sample.advantage
        if isinstance(adv, (list, tuple)):
            adv = [round(float(a), 5) for a in adv]
        elif adv is not None:
            adv = _jsonable(float(adv))
        answer = group.record.answer
        return {
            "step": step, "group": gi, "sample": si, "prompt_id": str(group.record.id),
            "prompt": group.prompt_text[: self.max_chars], "response": sample.text[: self.max_chars],
            "reward": _jsonable(float(sample.reward)),
            "rewards": {k: _jsonable(float(v)) for k, v in sample.rewards.items()},
            "reasons": dict(sample.meta.get("reasons", {})),
            "correct": sample.correct, "advantage": adv, "finish_reason": sample.finish_reason,
            "length": len(sample.response_ids), "policy_version": sample.policy_version,
            "answer": None if answer is None else str(answer), "difficulty": group.record.difficulty,
        }


def read_rollouts(run_dir: str | Path) -> list[dict[str, Any]]:
    """The stored samples of a run (empty when it has none); unreadable lines are skipped."""
    p = Path(run_dir)
    if p.is_dir():
        p = p / ROLLOUTS_FILE
    if not p.exists():
        return []
    out = []
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            if line.strip():
                out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
    return out
