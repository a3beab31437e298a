"""Rollout samples for the HTML report: `RolloutWriter` keeps a few prompts and responses per step in
RUN_DIR/rollouts.jsonl, and `read_rollouts` reads them back. For a visual task the writer also keeps each
stored prompt's images as small PNG thumbnails (`thumbnail_data_uri`)."""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.tracking.jsonl import _jsonable, truncate_jsonl

ROLLOUTS_FILE = "rollouts.jsonl"
THUMBNAIL_SIDE = 64  # pixels, the longer side of a stored thumbnail
MAX_THUMBNAILS = 16  # per prompt (images plus clip frames); the rest are not stored

log = logging.getLogger(__name__)


def thumbnail_data_uri(image: Any, max_side: int = THUMBNAIL_SIDE) -> str:
    """An image item (PIL image, path or bytes) as a `data:image/png;base64,...` URI of a PNG thumbnail whose
    longer side is at most `max_side` pixels (aspect ratio kept; smaller images are not enlarged)."""
    from rlvr.tasks.images import load_image

    thumb = load_image(image).copy()
    thumb.thumbnail((max_side, max_side))
    buf = io.BytesIO()
    thumb.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def record_thumbnails(record: Any, max_side: int = THUMBNAIL_SIDE, limit: int = MAX_THUMBNAILS) -> list[list[str]]:
    """The thumbnails of a task record's images, one list per image item: [uri] for an image, the frames' URIs
    in order for a clip. At most `limit` thumbnails in all; an image that cannot be decoded is left out."""
    out: list[list[str]] = []
    left = limit
    for item in record.images or []:
        frames = list(item) if isinstance(item, (list, tuple)) else [item]
        uris = []
        for frame in frames[:max(left, 0)]:
            try:
                uris.append(thumbnail_data_uri(frame, max_side))
            except Exception as err:  # the report is a view: a broken image is left out, never a failed step
                log.debug("rollouts: no thumbnail for record %r: %s", getattr(record, "id", "?"), err)
        left -= len(frames)
        if uris:
            out.append(uris)
    return out


class RolloutWriter:
    """Stores some of each step's samples in RUN_DIR/rollouts.jsonl, one JSON object per sample:

        step, group (index of the prompt within the step), sample (index within its group), prompt_id,
        prompt, response, reward, rewards {component: value}, reasons {component: reason}, correct,
        advantage (float, or one float per response token), finish_reason, length (response tokens),
        policy_version, answer (the reference answer, as text), difficulty

    and, when a step reward ran (process rewards), `steps`: {"ends": last response-token index of each scored
    step, "rewards": the step's weighted score}.

    and, for a prompt with images (a visual task), `images` on the group's first stored sample only: one list
    per image item of the prompt, [data URI] for an image or the frames' data URIs for a clip, each a PNG
    thumbnail at most `thumbnail_side` pixels on its longer side (`record_thumbnails`). Text-only prompts get
    no `images` key.

    It writes on steps divisible by `every` (0 switches it off), taking whole groups in order until
    `max_per_step` samples are stored, so advantages can be read against the rest of their group. Texts are
    cut at `max_chars`. On resume, lines after the checkpoint's step are dropped.
    """

    def __init__(self, run_dir: Path, every: int, max_per_step: int, *, resume_from_step: int | None = None,
                 max_chars: int = 20_000, thumbnail_side: int = THUMBNAIL_SIDE):
        if every < 0 or max_per_step < 0:
            raise ValueError(f"every and max_per_step must be >= 0; got {every}, {max_per_step}")
        self.path = Path(run_dir) / ROLLOUTS_FILE
        self.every, self.max_per_step, self.max_chars = every, max_per_step, max_chars
        self.thumbnail_side = thumbnail_side
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
                row = self.record(step, gi, si, group, sample)
                if si == 0 and getattr(group.record, "images", None):
                    thumbs = record_thumbnails(group.record, self.thumbnail_side)
                    if thumbs:
                        row["images"] = thumbs
                lines.append(json.dumps(row, default=str, ensure_ascii=False))
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
        row = {
            "step": step, "group": gi, "sample": si, "prompt_id": str(group.record.id),
            "prompt": group.prompt_text[: self.max_chars], "response": sample.text[: self.max_chars],
            "reward": _jsonable(float(sample.reward)),
            "rewards": {k: _jsonable(float(v)) for k, v in sample.rewards.items()},
            "reasons": dict(sample.meta.get("reasons", {})),
            "correct": sample.correct, "advantage": adv, "finish_reason": sample.finish_reason,
            "length": len(sample.response_ids), "policy_version": sample.policy_version,
            "answer": None if answer is None else str(answer), "difficulty": group.record.difficulty,
        }
        if getattr(sample, "step_ends", None) is not None:
            row["steps"] = {"ends": list(sample.step_ends),
                            "rewards": [_jsonable(round(float(r), 5)) for r in sample.step_rewards]}
        return row


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
