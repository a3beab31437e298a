"""Synthetic visual tasks (PIL-drawn, seeded, verifiable): the data of vision-language RL. See docs/vision.md."""

from rlvr.tasks.vision.tasks import (
    VISION_TASKS,
    ClickTask,
    CountFramesTask,
    CountTask,
    CountTextTask,
    DigitsSumTask,
    FramesTask,
    GroundTask,
    JigsawTask,
    VisionTask,
)

__all__ = ["VISION_TASKS", "ClickTask", "CountFramesTask", "CountTask", "CountTextTask", "DigitsSumTask", "FramesTask", "GroundTask", "JigsawTask",
           "VisionTask"]
