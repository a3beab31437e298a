"""GUI-RCPO: label-free spatial voting. The group's sampled boxes (or points) vote on a pixel grid, and each
sample is rewarded for how much its region agrees with the consensus."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import Field

from rlvr.rewards.base import REWARDS, RewardOutput
from rlvr.types import Group

Box = tuple[int, int, int, int]


def region_cells(kind: str, coords: tuple[float, ...], width: int, height: int, point_size: int) -> Box | None:
    """The grid cells [x1, x2) x [y1, y2) a predicted box or point covers, clipped to the image; None if empty.

    A box's corners are truncated to integers (as the paper's pseudo-code does); a point covers the
    `point_size` x `point_size` square centred on it (for an even size, one more cell below and right)."""
    if kind == "point":
        x, y = coords
        half = point_size // 2
        x1, y1 = math.floor(x) - half, math.floor(y) - half
        x2, y2 = x1 + point_size, y1 + point_size
    else:
        x1, y1, x2, y2 = (int(v) for v in coords)
    x1, x2 = max(0, min(width, x1)), max(0, min(width, x2))
    y1, y2 = max(0, min(height, y1)), max(0, min(height, y2))
    if x2 <= x1 or y2 <= y1:
        return None
    return x1, y1, x2, y2


def region_consistency(regions: list[Box | None], width: int, height: int) -> tuple[list[float], int]:
    r"""GUI-RC's voting grid and GUI-RCPO's reward, for one group.

        v(x, y) = #{ j : (x, y) in B_j }                      (every sampled region votes once per cell)
        v_max   = max_{x,y} v(x, y)                           (the consensus region is where v = v_max)
        R_i     = sum_{(x,y) in B_i} v(x, y) / (v_max * |B_i|)    in [1/v_max, 1]; 0 without a region

    A sample whose region lies inside the consensus region gets 1. Returns (rewards, v_max).
    """
    grid = [[0] * width for _ in range(height)]
    for box in regions:
        if box is None:
            continue
        x1, y1, x2, y2 = box
        for y in range(y1, y2):
            row = grid[y]
            for x in range(x1, x2):
                row[x] += 1
    v_max = max((max(row) for row in grid), default=0)
    rewards = []
    for box in regions:
        if box is None or v_max == 0:
            rewards.append(0.0)
            continue
        x1, y1, x2, y2 = box
        votes = sum(sum(grid[y][x1:x2]) for y in range(y1, y2))
        rewards.append(votes / (v_max * (x2 - x1) * (y2 - y1)))
    return rewards, v_max


def consensus_point(regions: list[Box | None]) -> tuple[float, float] | None:
    """GUI-RC's voted answer as a point: the centre of the first cell (row-major) with the most votes, or None when
    no sample gave a region. When several areas tie for the most votes this picks the top-left one."""
    votes: dict[tuple[int, int], int] = {}
    for box in regions:
        if box is not None:
            for y in range(box[1], box[3]):
                for x in range(box[0], box[2]):
                    votes[(y, x)] = votes.get((y, x), 0) + 1
    if not votes:
        return None
    top = max(votes.values())
    y, x = min(cell for cell, v in votes.items() if v == top)
    return x + 0.5, y + 0.5


def region_vote_hit(texts: list[str], record: Any, task: Any, point_size: int = 5) -> bool | None:
    """GUI-RC (test-time, no training): whether the voted point of the responses `texts` falls inside the record's
    true box; None when the task has no `predicted_region` or the record no box."""
    locate = getattr(task, "predicted_region", None)
    truth = record.answer
    if not callable(locate) or not isinstance(truth, (list, tuple)) or len(truth) != 4:
        return None
    width, height = _image_size(record, task)
    regions = []
    for text in texts:
        kind, coords = locate(text)
        regions.append(None if kind is None else region_cells(kind, coords, width, height, point_size))
    point = consensus_point(regions)
    return point is not None and truth[0] <= point[0] <= truth[2] and truth[1] <= point[1] <= truth[3]


@REWARDS.register("gui_rcpo")
class RegionConsistencyReward:
    r"""GUI-RCPO: region-consistency reward for grounding without labels.

    Each sample's predicted box (or point, covering a `point_size`-pixel square) votes on a W x H grid of the
    image; the reward is the mean vote inside the sample's region over the maximum vote (see
    `region_consistency`):

        R_i = sum_{(x,y) in B_i} v(x, y) / (v_max * |B_i|)

    A sample without a parseable box or point gets 0 and does not vote. The task must say where a response
    points: `task.predicted_region(response) -> ("box" | "point", coords) or (None, reason)` (vl_ground,
    vl_click), and its image size (`task.image_size`, else the record's first image). Metric `consensus_hit`:
    when references exist, the fraction of groups whose consensus cell (the first cell with v = v_max) lies
    inside the true box, i.e. GUI-RC's voted answer is right (measured, never trained on). Source: Du et al.,
    "Test-Time Reinforcement Learning for GUI Grounding via Region Consistency", arXiv:2508.05615 (reward as in
    the paper's appendix pseudo-code).
    """

    def __init__(self, *, point_size: Annotated[int, Field(ge=1, le=64)] = 5):
        self.point_size = point_size
        self.groups = 0
        self.hits = 0
        self.labelled = 0
        self.no_region = 0
        self.samples = 0

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        locate = getattr(task, "predicted_region", None)
        if not callable(locate):
            raise ValueError(f"rewards.gui_rcpo: task '{getattr(task, 'name', task)}' does not say where a response "
                             "points (no predicted_region); use a grounding task such as vl_click or vl_ground")
        width, height = _image_size(group.record, task)
        regions: list[Box | None] = []
        reasons = []
        for s in group.samples:
            kind, coords = locate(s.text)
            if kind is None:
                regions.append(None)
                reasons.append(f"no region: {coords}")
                continue
            box = region_cells(kind, coords, width, height, self.point_size)
            regions.append(box)
            reasons.append(f"{kind} cells {list(box)}" if box is not None else f"{kind} outside the image")
        rewards, v_max = region_consistency(regions, width, height)
        self._measure(group, regions, width, height, v_max)
        return [RewardOutput(r, f"{why}; agreement {r:.2f} (max vote {v_max})") for r, why in zip(rewards, reasons)]

    def _measure(self, group: Group, regions: list[Box | None], width: int, height: int, v_max: int) -> None:
        self.groups += 1
        self.samples += len(regions)
        self.no_region += sum(r is None for r in regions)
        truth = group.record.answer
        if v_max == 0 or not isinstance(truth, (list, tuple)) or len(truth) != 4:
            return
        x, y = consensus_point(regions)
        self.labelled += 1
        self.hits += int(truth[0] <= x <= truth[2] and truth[1] <= y <= truth[3])

    def metrics(self) -> dict[str, float]:
        m = {"no_region_frac": self.no_region / max(self.samples, 1)}
        if self.labelled:
            m["consensus_hit"] = self.hits / self.labelled
        self.groups = self.hits = self.labelled = self.no_region = self.samples = 0
        return m


def _image_size(record: Any, task: Any) -> tuple[int, int]:
    size = getattr(task, "image_size", None)
    if isinstance(size, int) and size > 0:
        return size, size
    images = record.images or []
    if images and hasattr(images[0], "size"):
        return tuple(images[0].size)  # type: ignore[return-value]
    raise ValueError("rewards.gui_rcpo: cannot tell the image size (no task.image_size and no PIL image in the "
                     "record)")
