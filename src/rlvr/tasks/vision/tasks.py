"""Seeded synthetic visual tasks: PIL-drawn images with verifiable answers.

Each task draws a scene from `random.Random(f"{name}-{seed}-{key}")`, so the same seed gives the same pixels.
Train and held-out splits never share a scene (`meta["scene"]`, a canonical description of what was drawn).
The record's `images` holds the PIL images in prompt order; `multimodal_messages` gives the chat with one
image entry per image, for a processor's chat template.

    vl_count       how many shapes                          exact integer       (counting, Perception-R1)
    vl_count_text  the same, the scene described in words   exact integer       (LMM-R1's text stage; no image)
    vl_count_frames  shapes in the LAST frame of a clip       exact integer       (Video-R1's T-GRPO; order matters)
    vl_digits_sum  the sum of the digits drawn              exact integer
    vl_ground      the box of the red square                IoU, correct >= 0.5 (grounding, VLM-R1)
    vl_click       a point on the named button of a screen  1 if inside its box (GUI-R1, UI-R1)
    vl_jigsaw      the order that restores a 2x2 shuffle    exact permutation, or positions right (Jigsaw-R1)
    vl_frames      the time order of shuffled clip frames   exact permutation, or positions right (Video-R1)
"""

from __future__ import annotations

import abc
import random
from typing import Annotated, Any, Literal

from pydantic import Field

from rlvr.tasks.base import TASKS, LazySplit, Task, TaskError, VerifyResult, distinct_records
from rlvr.tasks.vision import answers
from rlvr.tasks.vision.drawing import (
    COLORS,
    SHAPES,
    assemble,
    canvas,
    draw_digit,
    draw_shape,
    place_boxes,
    tiles,
)
from rlvr.types import TaskRecord

ImageSize = Annotated[int, Field(ge=32, le=512, description="side of the square images, pixels")]
TrainSize = Annotated[int, Field(ge=1)]
EvalSize = Annotated[int, Field(ge=1)]
Seed = Annotated[int, Field(ge=0)]


def _scene_key(record: TaskRecord) -> str:
    return record.meta["scene"]


class VisionTask(Task):
    """Base of the synthetic visual tasks: seeded scenes, scene-disjoint splits, multimodal messages."""

    name = "vision"
    visual = True
    default_prompt_template = "{question}"
    default_chat_template = "{question}"

    def __init__(
        self,
        *,
        image_size: ImageSize = 48,
        train_size: TrainSize = 100_000,
        eval_size: EvalSize = 200,
        seed: Seed = 0,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
    ):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        self.image_size = image_size
        self.seed = seed
        self._heldout = distinct_records(lambda i: self._problem(f"heldout-{i}"), eval_size, key=_scene_key)
        exclude = {_scene_key(r) for r in self._heldout}
        self._train = LazySplit(train_size, lambda i, attempt: self._problem(f"train-{i}-{attempt}"), exclude,
                                key=_scene_key)

    def _problem(self, key: str) -> TaskRecord:
        rng = random.Random(f"{self.name}-{self.seed}-{key}")
        try:
            record = self.make(rng)
        except ValueError as e:
            raise TaskError(f"task.image_size: {e}") from None
        record.id = f"{self.name}-{key}"
        record.source = self.name
        return record

    @abc.abstractmethod
    def make(self, rng: random.Random) -> TaskRecord:
        """One problem drawn from `rng` (id and source are filled in by the caller)."""

    def shuffle_frames(self, record: TaskRecord, rng: random.Random) -> TaskRecord | None:
        """The record with each clip's frames in a random order other than the original (same question, same
        answer), for Video-R1's T-GRPO contrast; None when the record has no clip of two or more frames."""
        clips = [i for i, item in enumerate(record.images or []) if isinstance(item, (list, tuple)) and len(item) > 1]
        if not clips:
            return None
        images = list(record.images)
        for i in clips:
            order = list(range(len(images[i])))
            while order == sorted(order):
                rng.shuffle(order)
            images[i] = [images[i][j] for j in order]
        return TaskRecord(id=f"{record.id}-shuffled", question=record.question, answer=record.answer,
                          difficulty=record.difficulty, source=record.source, images=images,
                          meta={**record.meta, "shuffled_of": record.id})

    def worked_solution(self, record: TaskRecord) -> str:
        """A correct response in builtin-vl's answer layout (a leading space after the template's "A:"): the reference
        for GKD's dataset steps and other off-policy samplers. Counting and digit sums add builtin-vl's scratchpad;
        a box is "[x1, y1, x2, y2]", a click the button's centre "(x, y)", an order its numbers."""
        answer = record.answer
        if isinstance(answer, (list, tuple)) and len(answer) == 4 and self.name == "vl_click":
            return f" ({(answer[0] + answer[2]) // 2}, {(answer[1] + answer[3]) // 2})"
        if isinstance(answer, (list, tuple)):
            return f" [{', '.join(str(int(v)) for v in answer)}]"
        return f" {answer}"

    def _integer_verdict(self, response: str, record: TaskRecord) -> VerifyResult:
        value, why = answers.parse_int(response)
        if value is None:
            return VerifyResult(0.0, False, why)
        if value == int(record.answer):
            return VerifyResult(1.0, True, "correct", str(value))
        return VerifyResult(0.0, False, f"wrong answer: got {value}, expected {record.answer}", str(value))

    def _order_verdict(self, response: str, record: TaskRecord) -> VerifyResult:
        expected = [int(x) for x in record.answer.split()]
        if getattr(self, "reward_mode", "exact") == "positions":
            return _positions_verdict(response, expected)
        order, why = answers.parse_order(response, len(expected))
        if order is None:
            return VerifyResult(0.0, False, why)
        got = " ".join(map(str, order))
        if order == expected:
            return VerifyResult(1.0, True, "correct", got)
        return VerifyResult(0.0, False, f"wrong order: got {got}, expected {record.answer}", got)


def _positions_verdict(response: str, expected: list[int]) -> VerifyResult:
    r"""Jigsaw-R1's graded reward for an order of n items: the fraction of positions whose number is right,

        r = |{i : o_i = e_i}| / n,

    when the answer lists exactly n numbers in 1..n (repeats allowed), else 0; correct only when all n are right.
    Source: Wang et al., "Jigsaw-R1: A Study of Rule-based Visual Reinforcement Learning with Jigsaw Puzzles",
    arXiv:2505.23590 (its accuracy reward for grid answers)."""
    got, why = answers.parse_numbers(response, len(expected))
    if got is None:
        return VerifyResult(0.0, False, why)
    right = sum(o == e for o, e in zip(got, expected))
    shown = " ".join(map(str, got))
    if right == len(expected):
        return VerifyResult(1.0, True, "correct", shown)
    return VerifyResult(right / len(expected), False, f"{right}/{len(expected)} positions right: got {shown}, "
                        f"expected {' '.join(map(str, expected))}", shown)


ORDER_REWARD = Annotated[Literal["exact", "positions"], Field(description=(
    "exact: reward 1 for the right order, else 0; positions: Jigsaw-R1's graded reward, the fraction of positions "
    "right (correct still means all right)"))]


@TASKS.register("vl_count")
class CountTask(VisionTask):
    """Count the shapes (squares, circles, triangles of several colours) in an image."""

    name = "vl_count"

    def __init__(self, *, max_count: Annotated[int, Field(ge=1, le=9)] = 6,
                 image_size: ImageSize = 48, train_size: TrainSize = 100_000,
                 eval_size: EvalSize = 200, seed: Seed = 0, prompt_template: str | None = None,
                 chat_prompt_template: str | None = None, system_prompt: str | None = None):
        self.max_count = max_count
        super().__init__(image_size=image_size, train_size=train_size, eval_size=eval_size, seed=seed,
                         prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)

    def make(self, rng: random.Random) -> TaskRecord:
        n = rng.randint(1, self.max_count)
        s = self.image_size
        sides = [(rng.randint(s // 8, s // 5),) * 2 for _ in range(n)]
        boxes = place_boxes(rng, s, sides)
        image, draw = canvas(s, rng)
        drawn = []
        for box in boxes:
            shape, color = rng.choice(SHAPES), rng.choice(list(COLORS))
            draw_shape(draw, shape, box, COLORS[color])
            drawn.append((shape, color, box))
        return TaskRecord(id="", question="How many shapes are in the image?", answer=str(n), difficulty=n,
                          images=[image], meta={"scene": repr(drawn), "shapes": drawn})

    def worked_solution(self, record: TaskRecord) -> str:
        """The shapes left to right as colour+shape initials, then the count: " rs bc: 2"."""
        shapes = sorted(record.meta["shapes"], key=lambda sh: (sh[2][0], sh[2][1]))
        return f" {' '.join(color[0] + shape[0] for shape, color, _box in shapes)}: {len(shapes)}"

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        return self._integer_verdict(response, record)


@TASKS.register("vl_count_text")
class CountTextTask(CountTask):
    """The text-only version of `vl_count`: the scene is described in words and there is no image.

    "The image shows a red square, a blue circle and a green triangle. How many shapes are in the image?" The
    shapes are listed left to right, as builtin-vl's scratchpad reads them, and the question ends as vl_count's
    does, so the answer layout ("rs bc gt: 3") carries over. It is LMM-R1's text stage for builtin-vl: a
    vision-language model trains on it through its language path (see docs/vision.md).
    """

    name = "vl_count_text"
    visual = False

    def make(self, rng: random.Random) -> TaskRecord:
        record = super().make(rng)
        shapes = sorted(record.meta["shapes"], key=lambda s: (s[2][0], s[2][1]))
        words = [f"{'an' if color[0] in 'aeiou' else 'a'} {color} {shape}" for shape, color, _box in shapes]
        listing = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
        record.question = f"The image shows {listing}. How many shapes are in the image?"
        record.images = None
        return record


@TASKS.register("vl_count_frames")
class CountFramesTask(CountTask):
    """A frames variant of `vl_count` where the order matters: a clip of `frames` frames in time order, shapes
    appearing one after another; the question asks how many shapes the LAST frame shows.

    The last frame holds the scene of vl_count (1 to `max_count` shapes); each earlier frame holds a prefix of
    it with fewer shapes (at least one fewer per frame, possibly none). The record's `images` is one clip (a list
    of frames), so `shuffle_frames` gives Video-R1's T-GRPO its temporally shuffled copy, on which the last frame
    is usually not the full scene.
    """

    name = "vl_count_frames"

    def __init__(self, *, frames: Annotated[int, Field(ge=2, le=4)] = 2, max_count: Annotated[int, Field(ge=1, le=9)] = 6,
                 image_size: ImageSize = 48, train_size: TrainSize = 100_000,
                 eval_size: EvalSize = 200, seed: Seed = 0, prompt_template: str | None = None,
                 chat_prompt_template: str | None = None, system_prompt: str | None = None):
        self.frames = frames
        super().__init__(max_count=max_count, image_size=image_size, train_size=train_size, eval_size=eval_size,
                         seed=seed, prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)

    def make(self, rng: random.Random) -> TaskRecord:
        from PIL import ImageDraw

        record = super().make(rng)
        last = record.images[0]
        background = last.getpixel((0, 0))  # the canvas colour: shapes keep a margin from the border
        shapes = record.meta["shapes"]
        n, k = len(shapes), self.frames
        counts = sorted(rng.randint(0, n - 1) for _ in range(k - 1)) + [n]  # shapes shown in each frame
        clip = []
        for c in counts[:-1]:
            frame = last.copy()
            draw = ImageDraw.Draw(frame)
            for _shape, _color, box in shapes[c:]:  # erase the shapes not yet there: the plain background
                draw.rectangle((box[0], box[1], box[2], box[3]), fill=background)
            clip.append(frame)
        clip.append(last)
        record.images = [clip]
        record.question = (f"These {k} frames of a short clip are in time order; shapes appear one after another. "
                           "How many shapes are in the last frame?")
        record.meta.update(counts=counts)
        record.meta["scene"] = repr((record.meta["scene"], counts))
        return record


@TASKS.register("vl_digits_sum")
class DigitsSumTask(VisionTask):
    """Read the digits drawn in an image (a built-in 3x5 bitmap font) and add them."""

    name = "vl_digits_sum"

    def __init__(self, *, digits: Annotated[tuple[int, int], Field(description="min, max digits drawn")] = (2, 3),
                 image_size: ImageSize = 48, train_size: TrainSize = 100_000,
                 eval_size: EvalSize = 200, seed: Seed = 0, prompt_template: str | None = None,
                 chat_prompt_template: str | None = None, system_prompt: str | None = None):
        lo, hi = digits
        if not 1 <= lo <= hi <= 4:
            raise TaskError(f"task.digits: expected 1 <= min <= max <= 4; got {list(digits)}")
        self.digits = (lo, hi)
        super().__init__(image_size=image_size, train_size=train_size, eval_size=eval_size, seed=seed,
                         prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)

    def make(self, rng: random.Random) -> TaskRecord:
        n = rng.randint(*self.digits)
        s = self.image_size
        scale = max(1, s // 16)
        image, draw = canvas(s, rng)
        values = [rng.randint(0, 9) for _ in range(n)]
        boxes = place_boxes(rng, s, [(3 * scale, 5 * scale)] * n)
        boxes.sort()  # left to right, so the scene reads like a number line
        ink = (rng.randint(0, 60), rng.randint(0, 60), rng.randint(0, 90))
        for v, box in zip(values, boxes):
            draw_digit(draw, str(v), box[0], box[1], scale, ink)
        return TaskRecord(id="", question="What is the sum of the digits in the image?", answer=str(sum(values)),
                          difficulty=n, images=[image], meta={"scene": repr((values, boxes)), "digits": values})

    def worked_solution(self, record: TaskRecord) -> str:
        """The digits read left to right, then their sum: " 6+4=10"."""
        digits = record.meta["digits"]
        return f" {'+'.join(map(str, digits))}={sum(digits)}"

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        return self._integer_verdict(response, record)


@TASKS.register("vl_ground")
class GroundTask(VisionTask):
    """Give the box [x1, y1, x2, y2] of the red square among distractors; reward = IoU with the true box.

    IoU(A, B) = |A ∩ B| / |A ∪ B|. The answer is `correct` at IoU >= `correct_iou` (0.5, the usual detection
    threshold). A malformed, inverted, non-finite or ambiguous (several different boxes) answer scores 0.
    """

    name = "vl_ground"

    def __init__(self, *, distractors: Annotated[int, Field(ge=0, le=6)] = 3,
                 correct_iou: Annotated[float, Field(gt=0, le=1)] = 0.5,
                 image_size: ImageSize = 48, train_size: TrainSize = 100_000,
                 eval_size: EvalSize = 200, seed: Seed = 0, prompt_template: str | None = None,
                 chat_prompt_template: str | None = None, system_prompt: str | None = None):
        self.distractors = distractors
        self.correct_iou = correct_iou
        super().__init__(image_size=image_size, train_size=train_size, eval_size=eval_size, seed=seed,
                         prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)

    def make(self, rng: random.Random) -> TaskRecord:
        s = self.image_size
        k = rng.randint(0, self.distractors)
        sides = [(rng.randint(s // 6, s // 3),) * 2] + [(rng.randint(s // 8, s // 4),) * 2 for _ in range(k)]
        boxes = place_boxes(rng, s, sides)
        image, draw = canvas(s, rng)
        target = boxes[0]
        draw_shape(draw, "square", target, COLORS["red"])
        others = []
        for box in boxes[1:]:
            # a distractor is a red non-square or a non-red square, so both words of 'red square' matter
            if rng.random() < 0.5:
                shape, color = rng.choice(("circle", "triangle")), "red"
            else:
                shape, color = "square", rng.choice([c for c in COLORS if c != "red"])
            draw_shape(draw, shape, box, COLORS[color])
            others.append((shape, color, box))
        question = (f"The image is {s}x{s} pixels. Give the bounding box of the red square as "
                    "[x1, y1, x2, y2] in pixels.")
        return TaskRecord(id="", question=question, answer=list(target), difficulty=k, images=[image],
                          meta={"scene": repr((target, others)), "box": list(target), "distractors": others})

    def predicted_region(self, response: str) -> tuple[str | None, Any]:
        """("box", (x1, y1, x2, y2)) for the response's one box, or (None, reason): for label-free voting."""
        box, why = answers.parse_box(response)
        return ("box", box) if box is not None else (None, why)

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        box, why = answers.parse_box(response)
        if box is None:
            return VerifyResult(0.0, False, why)
        score = answers.iou(box, tuple(record.answer))
        shown = "[" + ", ".join(f"{v:g}" for v in box) + "]"
        ok = score >= self.correct_iou
        return VerifyResult(score, ok, f"IoU {score:.3f} {'>=' if ok else '<'} {self.correct_iou}", shown,
                            meta={"iou": score})


@TASKS.register("vl_click")
class ClickTask(VisionTask):
    """A synthetic screen with coloured buttons: give a point (x, y) on the named one (reward 1 if inside)."""

    name = "vl_click"

    def __init__(self, *, buttons: Annotated[tuple[int, int], Field(description="min and max buttons")] = (2, 4),
                 image_size: ImageSize = 48, train_size: TrainSize = 100_000,
                 eval_size: EvalSize = 200, seed: Seed = 0, prompt_template: str | None = None,
                 chat_prompt_template: str | None = None, system_prompt: str | None = None):
        lo, hi = buttons
        if not 1 <= lo <= hi <= len(COLORS):
            raise TaskError(f"task.buttons: expected 1 <= min <= max <= {len(COLORS)}; got {list(buttons)}")
        self.buttons = (lo, hi)
        super().__init__(image_size=image_size, train_size=train_size, eval_size=eval_size, seed=seed,
                         prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)

    def make(self, rng: random.Random) -> TaskRecord:
        from PIL import ImageDraw

        s = self.image_size
        n = rng.randint(*self.buttons)
        bar = max(3, s // 10)
        image, _ = canvas(s, rng)
        draw = ImageDraw.Draw(image)
        draw.rectangle((0, 0, s - 1, bar - 1), fill=(70, 70, 90))  # title bar
        sides = [(rng.randint(s // 5, s // 3), rng.randint(s // 8, s // 5)) for _ in range(n)]
        boxes = place_boxes(rng, s, sides, avoid=[(0, 0, s, bar)])
        colors = rng.sample(list(COLORS), n)
        for color, box in zip(colors, boxes):
            draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=COLORS[color], outline=(40, 40, 40))
        target = rng.randrange(n)
        question = (f"This is a {s}x{s} pixel screen. Click the {colors[target]} button: give the point as "
                    "(x, y) in pixels.")
        return TaskRecord(id="", question=question, answer=list(boxes[target]), difficulty=n, images=[image],
                          meta={"scene": repr((colors, boxes, target)), "box": list(boxes[target]),
                                "target": colors[target], "buttons": dict(zip(colors, boxes))})

    def predicted_region(self, response: str) -> tuple[str | None, Any]:
        """("point", (x, y)) for the response's one point, or (None, reason): for label-free voting."""
        point, why = answers.parse_point(response)
        return ("point", point) if point is not None else (None, why)

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        point, why = answers.parse_point(response)
        if point is None:
            return VerifyResult(0.0, False, why)
        x, y = point
        x1, y1, x2, y2 = record.answer
        shown = f"({x:g}, {y:g})"
        if x1 <= x <= x2 and y1 <= y <= y2:
            return VerifyResult(1.0, True, "inside the button", shown)
        return VerifyResult(0.0, False, f"{shown} is outside the button box {list(record.answer)}", shown)


@TASKS.register("vl_jigsaw")
class JigsawTask(VisionTask):
    """A picture cut into 2x2 tiles and shuffled: give the shown tiles in the order that restores it.

    Tiles are numbered 1-4 in reading order as shown. The answer lists, for the restored picture's top-left,
    top-right, bottom-left and bottom-right in turn, the number of the shown tile that goes there. The picture
    has a red gradient left to right and a green one top to bottom (`gradient` sets their strength: weaker ones
    make a tile's place harder to read from its colour), plus shapes that cross tile borders.
    """

    name = "vl_jigsaw"

    def __init__(self, *, reward_mode: ORDER_REWARD = "exact",
                 gradient: Annotated[float, Field(gt=0, le=1, description=(
                     "strength of the picture's colour gradients (1: red 40-240 left to right, green 40-240 top "
                     "to bottom); weaker gradients make a tile's place harder to read from its colour"))] = 1.0,
                 image_size: ImageSize = 48,
                 train_size: TrainSize = 100_000, eval_size: EvalSize = 200, seed: Seed = 0,
                 prompt_template: str | None = None, chat_prompt_template: str | None = None,
                 system_prompt: str | None = None):
        self.reward_mode = reward_mode
        self.gradient = gradient
        super().__init__(image_size=image_size, train_size=train_size, eval_size=eval_size, seed=seed,
                         prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)

    def make(self, rng: random.Random) -> TaskRecord:
        from PIL import Image, ImageDraw

        s = self.image_size - self.image_size % 2
        blue = rng.randint(0, 255)
        span = round(200 * self.gradient)  # the gradient's range, centred on 140
        low = 140 - span // 2
        image = Image.new("RGB", (s, s))
        pixels = image.load()
        for y in range(s):
            for x in range(s):
                pixels[x, y] = (low + span * x // s, low + span * y // s, blue)
        draw = ImageDraw.Draw(image)
        drawn = []
        for _ in range(rng.randint(1, 2)):
            side = rng.randint(s // 4, s // 2)
            x, y = rng.randint(0, s - side), rng.randint(0, s - side)
            shape, color = rng.choice(SHAPES), rng.choice(list(COLORS))
            draw_shape(draw, shape, (x, y, x + side, y + side), COLORS[color])
            drawn.append((shape, color, x, y, side))
        perm = list(range(4))
        while perm == [0, 1, 2, 3]:
            rng.shuffle(perm)
        parts = tiles(image)
        shown = assemble([parts[p] for p in perm])  # shown tile j is original tile perm[j]
        order = [perm.index(p) + 1 for p in range(4)]
        question = ("The image was cut into 2x2 tiles, numbered 1-4 in reading order, and shuffled. For the "
                    "top-left, top-right, bottom-left and bottom-right of the original, give the number of the "
                    "tile that goes there, e.g. 2 4 1 3.")
        return TaskRecord(id="", question=question, answer=" ".join(map(str, order)), difficulty=1,
                          images=[shown], meta={"scene": repr((blue, drawn, perm)), "perm": perm,
                                                "original": image})

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        return self._order_verdict(response, record)


@TASKS.register("vl_frames")
class FramesTask(VisionTask):
    """The frames of a short clip of a falling ball, shuffled: give them in time order (gravity sets the arrow)."""

    name = "vl_frames"

    def __init__(self, *, frames: Annotated[int, Field(ge=2, le=6)] = 4, reward_mode: ORDER_REWARD = "exact",
                 image_size: ImageSize = 48, train_size: TrainSize = 100_000,
                 eval_size: EvalSize = 200, seed: Seed = 0, prompt_template: str | None = None,
                 chat_prompt_template: str | None = None, system_prompt: str | None = None):
        self.frames = frames
        self.reward_mode = reward_mode
        super().__init__(image_size=image_size, train_size=train_size, eval_size=eval_size, seed=seed,
                         prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)

    def make(self, rng: random.Random) -> TaskRecord:
        s, k = self.image_size, self.frames
        r = max(2, s // 12)
        step = rng.randint(max(2 * r, 3), max(2 * r, (s - 2 * r - 2) // k))  # falls at least one diameter a frame
        y0 = rng.randint(r, max(r, s - r - 1 - step * (k - 1)))
        x0, dx = rng.randint(r, s - r - 1), rng.choice((-2, -1, 0, 1, 2))
        color = rng.choice(list(COLORS))
        background = tuple(rng.randint(225, 255) for _ in range(3))
        post = (rng.randint(0, s - 4), rng.randint(s // 4, s - 1))  # a fixed landmark, the same in every frame
        clip = []
        for t in range(k):
            image, draw = canvas(s, random.Random(0))
            draw.rectangle((0, 0, s - 1, s - 1), fill=background)
            draw.rectangle((post[0], post[1], post[0] + 3, s - 1), fill=(90, 90, 90))
            x = min(s - r - 1, max(r, x0 + dx * t))
            y = min(s - r - 1, y0 + step * t)
            draw_shape(draw, "circle", (x - r, y - r, x + r + 1, y + r + 1), COLORS[color])
            clip.append(image)
        perm = list(range(k))
        while perm == sorted(perm):
            rng.shuffle(perm)
        order = [perm.index(t) + 1 for t in range(k)]  # shown frame j is clip frame perm[j]
        question = (f"These {k} frames of a short clip of a falling ball are shuffled and numbered 1-{k} as shown. "
                    f"Give the frame numbers in time order, e.g. {' '.join(map(str, range(k, 0, -1)))}.")
        return TaskRecord(id="", question=question, answer=" ".join(map(str, order)), difficulty=k,
                          images=[clip[p] for p in perm],
                          meta={"scene": repr((x0, y0, dx, step, color, background, post, perm)), "perm": perm})

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        return self._order_verdict(response, record)


VISION_TASKS = ("vl_count", "vl_digits_sum", "vl_ground", "vl_click", "vl_jigsaw", "vl_frames")
