"""Synthetic visual tasks: seeded generators, hand-checked verifiers (IoU especially), adversarial answers,
and the image helpers' errors (undecodable image, placeholder count, skip-and-count)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from rlvr.registry import RegistryError
from rlvr.tasks import TASKS, TaskError, build_task
from rlvr.tasks.images import (
    ImageError,
    check_placeholders,
    count_images,
    load_image,
    record_images,
    split_decodable,
)
from rlvr.tasks.vision import VISION_TASKS
from rlvr.tasks.vision.answers import iou, parse_box, parse_int, parse_order, parse_point
from rlvr.tasks.vision.drawing import assemble, tiles
from rlvr.types import TaskRecord

SMALL = {"eval_size": 8, "train_size": 50}


@pytest.fixture(scope="module")
def tasks():
    return {name: build_task(name, {**SMALL, "seed": 3}) for name in VISION_TASKS}


def _pixels(record: TaskRecord) -> list[np.ndarray]:
    return [np.asarray(im) for im in record_images(record)]


# -- generators -----------------------------------------------------------------------------------------


def test_all_registered_and_build(tasks) -> None:
    for name in VISION_TASKS:
        assert name in TASKS.names()
        record = tasks[name].train[0]
        assert record.images and record.source == name and record.id.startswith(name)
        for image in record_images(record):
            assert image.mode == "RGB" and image.size == (48, 48)


@pytest.mark.parametrize("name", VISION_TASKS)
def test_same_seed_same_images(name) -> None:
    a, b = build_task(name, {**SMALL, "seed": 7}), build_task(name, {**SMALL, "seed": 7})
    c = build_task(name, {**SMALL, "seed": 8})
    for i in (0, 5):
        ra, rb = a.train[i], b.train[i]
        assert ra.answer == rb.answer and ra.question == rb.question
        assert all(np.array_equal(x, y) for x, y in zip(_pixels(ra), _pixels(rb)))
        assert np.array_equal(_pixels(a.heldout[i])[0], _pixels(b.heldout[i])[0])
    differ = [not np.array_equal(_pixels(a.train[i])[0], _pixels(c.train[i])[0]) for i in range(5)]
    assert any(differ)


@pytest.mark.parametrize("name", VISION_TASKS)
def test_splits_share_no_scene(name, tasks) -> None:
    task = tasks[name]
    held = {r.meta["scene"] for r in task.heldout}
    assert len(held) == len(task.heldout)
    assert not held & {r.meta["scene"] for r in task.train}


@pytest.mark.parametrize("name", VISION_TASKS)
def test_reference_answer_scores_one(name, tasks) -> None:
    task = tasks[name]
    for record in list(task.heldout) + task.train[:10]:
        if name == "vl_ground":
            text = "Answer: [" + ", ".join(map(str, record.answer)) + "]"
        elif name == "vl_click":
            x1, y1, x2, y2 = record.answer
            text = f"Answer: ({(x1 + x2) / 2}, {(y1 + y2) / 2})"
        else:
            text = f"Answer: {record.answer}"
        result = task.verify(text, record)
        assert result.reward == 1.0 and result.correct, (record.id, result.reason)


def test_count_answer_matches_drawn_shapes(tasks) -> None:
    for record in tasks["vl_count"].train[:10]:
        assert int(record.answer) == len(record.meta["shapes"])


def test_digits_are_drawn_and_summed(tasks) -> None:
    for record in tasks["vl_digits_sum"].train[:10]:
        assert int(record.answer) == sum(record.meta["digits"])
        ink = (_pixels(record)[0].sum(axis=2) < 300).sum()  # dark pixels only come from digit strokes
        assert ink > 0


def test_ground_box_is_the_red_square(tasks) -> None:
    for record in tasks["vl_ground"].train[:10]:
        x1, y1, x2, y2 = record.answer
        patch = _pixels(record)[0][y1:y2, x1:x2]
        assert (patch == (220, 30, 30)).all()  # the whole box is red: a filled square exactly in its box


def test_jigsaw_answer_restores_the_picture(tasks) -> None:
    for record in tasks["vl_jigsaw"].train[:10]:
        shown = tiles(record_images(record)[0])
        order = [int(x) for x in record.answer.split()]
        restored = assemble([shown[j - 1] for j in order])
        assert np.array_equal(np.asarray(restored), np.asarray(record.meta["original"]))


def test_jigsaw_gradient_sets_the_colour_range_and_keeps_the_puzzle() -> None:
    faint = build_task("vl_jigsaw", {**SMALL, "seed": 3, "gradient": 0.4})
    full = build_task("vl_jigsaw", {**SMALL, "seed": 3})
    for strength, task in ((0.4, faint), (1.0, full)):
        original = np.asarray(task.train[0].meta["original"]).astype(int)
        # the background's red grows left to right over round(200 * strength) levels, centred on 140; the top row
        # and the first column are background unless a shape covers them, so take the most common value
        low = 140 - round(200 * strength) // 2
        assert np.bincount(original[:, 0, 0]).argmax() == low
        assert np.bincount(original[0, :, 1]).argmax() == low
    assert faint.train[0].answer == full.train[0].answer  # same scene and shuffle: only the colours differ
    for bad in (0, 1.5):
        with pytest.raises(RegistryError, match="gradient"):
            build_task("vl_jigsaw", {**SMALL, "gradient": bad})


def test_frames_answer_is_time_order(tasks) -> None:
    for record in tasks["vl_frames"].train[:10]:
        frames = _pixels(record)
        order = [int(x) for x in record.answer.split()]

        def ball_row(frame: np.ndarray) -> float:
            # the ball is the only saturated colour; its mean row grows with time (it falls)
            sat = frame.max(axis=2).astype(int) - frame.min(axis=2).astype(int)
            return float(np.nonzero(sat > 100)[0].mean())

        rows = [ball_row(frames[j - 1]) for j in order]
        assert rows == sorted(rows) and rows[0] < rows[-1]


def test_multimodal_messages_one_image_entry_per_image(tasks) -> None:
    record = tasks["vl_frames"].train[0]
    messages = tasks["vl_frames"].multimodal_messages(record)
    content = messages[-1]["content"]
    assert sum(c["type"] == "image" for c in content) == 4 == count_images(record)
    assert content[-1]["type"] == "text" and record.question in content[-1]["text"]
    prompt = tasks["vl_frames"].plain_prompt_with_images(record)
    check_placeholders(prompt, count_images(record), record_id=record.id)


def test_bad_params_name_the_key() -> None:
    with pytest.raises(TaskError, match="task.digits"):
        build_task("vl_digits_sum", {"digits": [3, 9]})
    with pytest.raises(RegistryError):
        build_task("vl_count", {"max_count": 0})


# -- verifiers, hand-checked --------------------------------------------------------------------------------


def test_iou_hand_computed() -> None:
    assert iou((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0
    # overlap 5x10 = 50; union 100 + 100 - 50 = 150
    assert iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(50 / 150)
    # overlap 5x5 = 25; union 100 + 100 - 25 = 175
    assert iou((0, 0, 10, 10), (5, 5, 15, 15)) == pytest.approx(25 / 175)
    # nested: 4x4 inside 10x10 -> 16 / 100
    assert iou((0, 0, 10, 10), (3, 3, 7, 7)) == pytest.approx(0.16)
    assert iou((0, 0, 10, 10), (10, 0, 20, 10)) == 0.0  # touching edges
    assert iou((0, 0, 10, 10), (20, 20, 30, 30)) == 0.0
    assert iou((0, 0, 10, 10), (5, 5, 5, 5)) == 0.0  # zero-area prediction


def test_ground_reward_is_iou(tasks) -> None:
    task = tasks["vl_ground"]
    record = TaskRecord(id="g", question="q", answer=[10, 10, 20, 20])
    r = task.verify("Answer: [15, 10, 25, 20]", record)  # overlap 5x10 = 50, union 150
    assert r.reward == pytest.approx(1 / 3) and not r.correct
    r = task.verify("the box is [11, 10, 21, 20]", record)  # overlap 9x10 = 90, union 110
    assert r.reward == pytest.approx(90 / 110) and r.correct
    r = task.verify("<answer>(12.5, 10, 20, 20)</answer>", record)  # 75 / 100
    assert r.reward == pytest.approx(0.75) and r.correct
    # exactly 0.5 counts as correct: [10,10,20,30] vs [10,10,20,20]: 100 / 200
    assert task.verify("[10, 10, 20, 30]", record).correct


@pytest.mark.parametrize("text, why", [
    ("", "no box"),
    ("I think it is somewhere on the left", "no box"),
    ("[1, 2, 3]", "no box"),
    ("[20, 20, 10, 10]", "inverted"),
    ("[10, 10, 10, 20]", "empty"),
    ("[nan, 10, 20, 20]", "no box"),
    ("[1e999, 10, 20, 20]", "finite"),
    ("[0, 0, 1e300, 1e300]", "finite"),
    ("[0, 0, 99999999999999999999999, 5]", "finite"),
    ("[10, 10, 20, 20] or [0, 0, 48, 48]", "different boxes"),
    ("Answer: [10, 10, 20, 20], [11, 10, 21, 20]", "different boxes"),
])
def test_ground_adversarial_answers_score_zero(tasks, text, why) -> None:
    record = TaskRecord(id="g", question="q", answer=[10, 10, 20, 20])
    r = tasks["vl_ground"].verify(text, record)
    assert r.reward == 0.0 and not r.correct and why in r.reason


def test_ground_answer_region_wins_over_reasoning(tasks) -> None:
    record = TaskRecord(id="g", question="q", answer=[10, 10, 20, 20])
    text = "First guess [0, 0, 5, 5], on reflection:\nAnswer: [10, 10, 20, 20]"
    assert tasks["vl_ground"].verify(text, record).reward == 1.0
    assert tasks["vl_ground"].verify("[10, 10, 20, 20] and again [10, 10, 20, 20]", record).reward == 1.0


def test_click_inside_outside(tasks) -> None:
    task = tasks["vl_click"]
    record = TaskRecord(id="c", question="q", answer=[10, 20, 30, 28])
    assert task.verify("Answer: (15, 25)", record).reward == 1.0
    assert task.verify("(10, 20)", record).reward == 1.0  # the edge is inside
    assert task.verify("[30, 28]", record).reward == 1.0
    assert task.verify("(30.5, 25)", record).reward == 0.0
    assert task.verify("(15, 19.9)", record).reward == 0.0
    for bad in ("(15, 25) (40, 40)", "(nan, 25)", "(1e999, 5)", "[10, 20, 30, 28]", "click it", "(15 25)"):
        r = task.verify(bad, record)
        assert r.reward == 0.0 and not r.correct and r.reason, bad


def test_integer_answers(tasks) -> None:
    task = tasks["vl_count"]
    record = TaskRecord(id="n", question="q", answer="4")
    assert task.verify("Answer: 4", record).correct
    assert task.verify("There are 4 shapes.", record).correct
    assert task.verify(r"\boxed{4}", record).correct
    for bad in ("Answer: 5", "Answer: 4.5", "Answer: " + "9" * 400, "nan", "inf", "", "four", "Answer: -4"):
        r = task.verify(bad, record)
        assert r.reward == 0.0 and not r.correct, bad
    assert parse_int("1" * 20)[0] is None and "too large" in parse_int("1" * 20)[1]


def test_order_answers(tasks) -> None:
    task = tasks["vl_jigsaw"]
    record = TaskRecord(id="o", question="q", answer="3 1 4 2")
    for good in ("Answer: 3 1 4 2", "[3, 1, 4, 2]", "<answer>3,1,4,2</answer>", "Answer: 3-1-4-2"):
        assert task.verify(good, record).correct, good
    assert not task.verify("Answer: 1 3 4 2", record).correct
    for bad, why in (("3 1 4", "expected 4"), ("3 3 4 2", "permutation"), ("3 1 4 2 5", "expected 4"),
                     ("3 1 4 99999", "too large"), ("", "no order")):
        r = task.verify(bad, record)
        assert r.reward == 0.0 and why in r.reason, bad
    assert parse_order("2 1", 2) == ([2, 1], "")


def test_parsers_never_raise_on_garbage() -> None:
    junk = ["\x00" * 50, "[" * 1000, "(" + "9," * 500 + ")", "Answer:" * 100, "[-0, -0, -0, -0]", "💥 [1,2,3,4] 💥",
            "<answer></answer>", r"\boxed{", "1e-999999"]
    for text in junk:
        parse_box(text), parse_point(text), parse_order(text, 4), parse_int(text)


# -- images of a record --------------------------------------------------------------------------------------


def _png_bytes() -> bytes:
    buf = io.BytesIO()
    Image.new("L", (5, 4), 128).save(buf, format="PNG")
    return buf.getvalue()


def test_load_image_kinds(tmp_path) -> None:
    data = _png_bytes()
    path = tmp_path / "a.png"
    path.write_bytes(data)
    for item in (data, str(path), path, Image.open(io.BytesIO(data))):
        image = load_image(item, record_id="r")
        assert image.mode == "RGB" and image.size == (5, 4)
    record = TaskRecord(id="clip", question="q", images=[data, [data, str(path), data]])
    assert count_images(record) == 4 and len(record_images(record)) == 4


def test_bad_images_name_record_and_problem(tmp_path) -> None:
    with pytest.raises(ImageError, match=r"record 'r7', image 0: the bytes cannot be decoded"):
        load_image(b"not an image at all", record_id="r7")
    with pytest.raises(ImageError, match="cannot be decoded"):
        load_image(_png_bytes()[:30], record_id="r7")  # truncated
    with pytest.raises(ImageError, match="empty"):
        load_image(b"", record_id="r7")
    with pytest.raises(ImageError, match="does not exist"):
        load_image(str(tmp_path / "missing.png"), record_id="r7")
    (tmp_path / "bad.png").write_text("hello")
    with pytest.raises(ImageError, match="bad.png' cannot be decoded"):
        load_image(tmp_path / "bad.png", record_id="r7")
    with pytest.raises(ImageError, match="got int"):
        load_image(3, record_id="r7")
    with pytest.raises(ImageError, match="record 'c', image 1: a clip with no frames"):
        record_images(TaskRecord(id="c", question="q", images=[_png_bytes(), []]))


def test_placeholder_mismatch_is_named() -> None:
    check_placeholders("<image><image> what?", 2, record_id="p")
    with pytest.raises(ImageError, match=r"record 'p': the prompt has 1 '<image>' placeholder\(s\) but the "
                                         r"record has 2 image\(s\)"):
        check_placeholders("<image> what?", 2, record_id="p")


def test_broken_images_are_skipped_and_counted() -> None:
    good = TaskRecord(id="ok", question="q", images=[_png_bytes()])
    records = [good, TaskRecord(id="bad", question="q", images=[b"garbage"]),
               TaskRecord(id="bad2", question="q", images=[_png_bytes(), "/nonexistent.png"]), good]
    kept, skipped = split_decodable(records)
    assert [r.id for r in kept] == ["ok", "ok"]
    assert [rid for rid, _ in skipped] == ["bad", "bad2"] and "does not exist" in skipped[1][1]


def test_text_records_have_no_images() -> None:
    record = TaskRecord(id="t", question="1+1")
    assert record.images is None and count_images(record) == 0 and record_images(record) == []


def test_order_tasks_graded_positions_reward_by_hand():
    from rlvr.tasks import build_task

    task = build_task("vl_jigsaw", {"eval_size": 1, "train_size": 1, "reward_mode": "positions"})
    record = task.heldout[0]
    record.answer = "3 4 2 1"
    cases = {" 3 4 2 1": (1.0, True), " 3 4 1 2": (0.5, False), " 1 1 1 1": (0.25, False),
             " [2, 4, 2, 4]": (0.5, False), " 4 3 1 2": (0.0, False), " 3 4 2": (0.0, False),
             " 3 4 2 5": (0.0, False), " 3 4 2 1 1": (0.0, False), "no idea": (0.0, False)}
    for response, (reward, correct) in cases.items():
        result = task.verify(response, record)
        assert (result.reward, result.correct) == (reward, correct), response
    exact = build_task("vl_frames", {"eval_size": 1, "train_size": 1, "frames": 3})
    graded = build_task("vl_frames", {"eval_size": 1, "train_size": 1, "frames": 3, "reward_mode": "positions"})
    rec = exact.heldout[0]
    rec.answer = "2 3 1"
    assert exact.verify(" 2 1 3", rec).reward == 0.0
    assert graded.verify(" 2 1 3", rec).reward == pytest.approx(1 / 3)


def test_every_visual_task_has_a_correct_worked_solution():
    from rlvr.tasks import build_task
    from rlvr.tasks.vision import VISION_TASKS

    for name in (*VISION_TASKS, "vl_count_text", "vl_count_frames"):
        task = build_task(name, {"eval_size": 5, "train_size": 1})
        for record in task.heldout:
            text = task.worked_solution(record)
            assert text.startswith(" ") and task.verify(text, record).correct, (name, text)
