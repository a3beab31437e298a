"""Label-free rewards of the vision-language recipes against hand-computed values: GUI-RCPO's region
consistency (spatial voting), TTRV on counting answers, and T-GRPO's temporal contrast rule."""

from __future__ import annotations

import math

import pytest

from rlvr.rewards import REWARDS
from rlvr.rewards.label_free import (
    FrequencyEntropyReward,
    RegionConsistencyReward,
    region_cells,
    region_consistency,
)
from rlvr.tasks.vision import answers
from rlvr.types import Group, Sample, TaskRecord


class GridTask:
    """A 10x10 grounding task: boxes or points parsed as the vision tasks parse them."""

    name = "grid"
    image_size = 10

    def predicted_region(self, response):
        box, why = answers.parse_box(response)
        if box is not None:
            return "box", box
        point, why = answers.parse_point(response)
        return ("point", point) if point is not None else (None, why)


def group(texts, answer=None):
    samples = [Sample(prompt_ids=[1], response_ids=[2, 3], text=t) for t in texts]
    return Group(TaskRecord(id="g", question="where?", answer=answer), [1], samples)


def test_region_consistency_by_hand():
    # A = [0,2)x[0,2), B = [1,3)x[1,3), C = the cell (1,1): votes 3 at (1,1), 1 elsewhere in A and B
    a, b, c = (0, 0, 2, 2), (1, 1, 3, 3), (1, 1, 2, 2)
    rewards, v_max = region_consistency([a, b, c, None], 10, 10)
    assert v_max == 3
    # A: (1+1+1+3) / (3 * 4) = 0.5; B likewise; C: 3 / (3 * 1) = 1; no region: 0
    assert rewards == pytest.approx([0.5, 0.5, 1.0, 0.0])
    assert region_consistency([None, None], 10, 10) == ([0.0, 0.0], 0)
    assert region_consistency([a], 10, 10) == ([1.0], 1)  # a lone region is its own consensus


def test_region_cells_points_boxes_and_clipping():
    assert region_cells("point", (5.4, 5.9), 10, 10, 3) == (4, 4, 7, 7)   # 3x3 around the point's cell
    assert region_cells("point", (0.0, 0.0), 10, 10, 3) == (0, 0, 2, 2)   # clipped to the image
    assert region_cells("point", (4.0, 4.0), 10, 10, 4) == (2, 2, 6, 6)   # even size: one more right/below
    assert region_cells("box", (1.7, 2.2, 4.9, 8.0), 10, 10, 3) == (1, 2, 4, 8)  # truncated as the paper does
    assert region_cells("box", (8, 8, 30, 30), 10, 10, 3) == (8, 8, 10, 10)
    assert region_cells("box", (20, 20, 30, 30), 10, 10, 3) is None      # entirely off the image
    assert region_cells("point", (-50.0, 3.0), 10, 10, 3) is None


def test_gui_rcpo_component_on_parsed_responses():
    reward = RegionConsistencyReward(point_size=1)
    # three points: two on cell (2,2), one on (7,7); and an answer without a point
    g = group(["(2, 2)", "(2.5, 2.9)", "(7, 7)", "no idea"], answer=[0, 0, 4, 4])
    out = reward(g, GridTask())
    # grid: (2,2) has 2 votes, (7,7) 1; v_max = 2 -> rewards 2/2, 2/2, 1/2, 0
    assert [o.value for o in out] == pytest.approx([1.0, 1.0, 0.5, 0.0])
    assert "no region" in out[3].reason
    m = reward.metrics()
    assert m["no_region_frac"] == pytest.approx(0.25)
    assert m["consensus_hit"] == 1.0  # the consensus cell (2,2) lies in the true box [0,0,4,4]
    assert reward.metrics() == {"no_region_frac": 0.0}  # reset after reading
    # boxes, and the hand example above through the parser
    out = RegionConsistencyReward()(group(["[0, 0, 2, 2]", "[1, 1, 3, 3]", "[1, 1, 2, 2]"]), GridTask())
    assert [o.value for o in out] == pytest.approx([0.5, 0.5, 1.0])
    assert "gui_rcpo" in REWARDS


def test_gui_rcpo_refuses_a_task_without_regions():
    class TextTask:
        name = "addition"

    with pytest.raises(ValueError, match="gui_rcpo.*vl_click"):
        RegionConsistencyReward()(group(["(1, 1)"]), TextTask())


def test_ttrv_on_counting_answers():
    # vl_count answers with scratchpads: "3" x2, "2" x1, none x1 (a singleton in the entropy, frequency 0)
    from rlvr.tasks import build_task

    task = build_task("vl_count", {"eval_size": 1, "train_size": 1})
    g = group([" rs bc gt: 3", " oc ps rc: 3", " rs bc: 2", " zz"], answer="3")
    out = FrequencyEntropyReward(alpha=0.5)(g, task)
    p = [0.5, 0.5, 0.25, 0.25]
    r1 = [0.5, 0.5, 0.25, 0.0]
    assert [o.value for o in out] == pytest.approx([f + 0.5 * math.log(q) for f, q in zip(r1, p)])


# -- T-GRPO ------------------------------------------------------------------------------------------------


def test_temporal_bonus_rule_by_hand():
    from rlvr.rewards.temporal import temporal_bonus

    # ordered 3/4 correct > shuffled 1/4: correct ordered responses get alpha, wrong ones 0
    assert temporal_bonus([True, True, False, True], [False, True, False, False], 0.3) == ([0.3, 0.3, 0.0, 0.3], True)
    # a tie (2/4 = 2/4) or a loss earns nothing
    assert temporal_bonus([True, True, False, False], [True, False, True, False], 0.3) == ([0.0] * 4, False)
    assert temporal_bonus([True, False], [True, True], 0.3) == ([0.0, 0.0], False)
    # no shuffled twin: no bonus; an empty group: nothing
    assert temporal_bonus([True], [], 0.3) == ([0.0], False)
    assert temporal_bonus([], [True], 0.3) == ([], False)


def test_t_grpo_component_pairs_groups_with_their_shuffled_twins():
    import random

    from rlvr.rewards.temporal import TemporalContrastReward
    from rlvr.tasks import build_task

    task = build_task("vl_count_frames", {"eval_size": 2, "train_size": 1})
    rec = task.heldout[0]
    twin = task.shuffle_frames(rec, random.Random(0))
    assert twin.meta["shuffled_of"] == rec.id and twin.answer == rec.answer and twin.question == rec.question
    assert twin.images[0] == rec.images[0][::-1]  # two frames: the only other order
    right, wrong = f" rs: {rec.answer}", f" rs: {int(rec.answer) + 1}"

    def grp(r, texts):
        return Group(r, [1], [Sample(prompt_ids=[1], response_ids=[2], text=t) for t in texts])

    lone = task.heldout[1]
    groups = [grp(rec, [right, right, wrong]), grp(twin, [right, wrong, wrong]), grp(lone, [right])]
    reward = TemporalContrastReward(alpha=0.3)
    out = reward.score_batch(groups, task)
    assert [o.value for o in out[0]] == pytest.approx([0.3, 0.3, 0.0])  # 2/3 > 1/3
    assert [o.value for o in out[1]] == [0.0, 0.0, 0.0] and "contrast only" in out[1][0].reason
    assert out[2][0].value == 0.0  # no twin in the batch
    m = reward.metrics()
    assert m["granted_frac"] == 1.0 and m["p_ordered"] == pytest.approx(2 / 3)
    assert m["p_shuffled"] == pytest.approx(1 / 3) and m["unpaired_frac"] == pytest.approx(0.5)
    assert "t_grpo" in REWARDS and task.shuffle_frames(build_task("vl_count", {"eval_size": 1,
                                                                               "train_size": 1}).heldout[0],
                                                       random.Random(0)) is None  # no clip, nothing to shuffle


def test_vl_count_frames_clip_is_in_time_order():
    import numpy as np

    from rlvr.tasks import build_task

    task = build_task("vl_count_frames", {"eval_size": 6, "train_size": 1, "frames": 3})
    again = build_task("vl_count_frames", {"eval_size": 6, "train_size": 1, "frames": 3})
    for rec, same in zip(task.heldout, again.heldout):
        (clip,) = rec.images  # one clip of three frames
        counts = rec.meta["counts"]
        assert len(clip) == 3 and counts == sorted(counts) and counts[-1] == int(rec.answer) and counts[0] < counts[-1]
        assert "last frame" in rec.question
        assert np.array_equal(np.asarray(clip[-1]), np.asarray(same.images[0][-1]))  # seeded: the same pixels
        blank = np.asarray(clip[0]) == np.asarray(clip[0])[0, 0]
        assert blank.all() == (counts[0] == 0)  # a frame with no shapes yet is the plain canvas


def test_gui_rc_vote_by_hand():
    from rlvr.rewards.label_free.region import consensus_point, region_vote_hit
    from rlvr.tasks import build_task

    # boxes [x1, y1, x2, y2) of cells: (2,2)-(4,4) is covered by all three, so its first cell (x 2, y 2) wins
    assert consensus_point([(0, 0, 4, 4), (2, 2, 6, 6), (2, 2, 4, 4), None]) == (2.5, 2.5)
    assert consensus_point([None, None]) is None
    assert consensus_point([(5, 1, 6, 2), (1, 5, 2, 6)]) == (5.5, 1.5)  # a tie: the top-left-most cell, row-major
    task = build_task("vl_click", {"eval_size": 1, "train_size": 1})
    record = task.heldout[0]
    record.answer = [10, 10, 20, 16]
    inside, outside = "(15, 13)", "(30, 30)"
    # 5x5-pixel squares around the points: two inside agree, one outside -> the vote lands inside
    assert region_vote_hit([inside, inside, outside], record, task) is True
    assert region_vote_hit([outside, outside, inside], record, task) is False
    assert region_vote_hit(["no point", "none"], record, task) is False
    counting = build_task("vl_count", {"eval_size": 1, "train_size": 1})
    assert region_vote_hit(["3"], counting.heldout[0], counting) is None  # not a grounding task


def test_eval_reports_the_gui_rc_vote_on_a_grounding_task():
    import torch

    from rlvr.eval.evaluate import evaluate
    from rlvr.models import load_tokenizer
    from rlvr.models.vision import load_processor, load_vlm_for_training
    from rlvr.rollout import SamplingParams, build_engine
    from rlvr.tasks import PromptRenderer, build_task

    task = build_task("vl_click", {"eval_size": 4, "train_size": 1})
    tok = load_tokenizer("builtin-vl")
    engine = build_engine("hf", {}, 64, load_vlm_for_training("builtin-vl", trainable=False), tok)
    renderer = PromptRenderer(task, tok, "auto", load_processor("builtin-vl"))
    torch.manual_seed(0)
    result = evaluate(engine, renderer, task, task.heldout, SamplingParams(n=3, max_new_tokens=12), [1])
    votes = [p["region_vote"] for p in result["problems"]]
    assert len(votes) == 4 and result["region_vote"] == sum(votes) / 4
    counting = build_task("vl_count", {"eval_size": 2, "train_size": 1})
    plain = evaluate(engine, PromptRenderer(counting, tok, "auto", load_processor("builtin-vl")), counting,
                     counting.heldout, SamplingParams(n=2, max_new_tokens=8), [1])
    assert "region_vote" not in plain
