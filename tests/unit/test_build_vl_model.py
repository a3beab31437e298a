"""scripts/build_vl_model.py's spatial options: the attention guide's targets and loss, the 2D position code."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("build_vl_model", ROOT / "scripts" / "build_vl_model.py")
build = importlib.util.module_from_spec(spec)
sys.modules["build_vl_model"] = build
spec.loader.exec_module(build)


def test_patch_weights_are_the_box_area_per_8x8_patch() -> None:
    # box x 4..12, y 0..8 (exclusive ends): half in patch (0, 0), half in patch (0, 1)
    w = build.patch_weights([4, 0, 12, 8])
    assert len(w) == 36
    assert w[0] == pytest.approx(0.5) and w[1] == pytest.approx(0.5) and sum(w[2:]) == 0
    # 10x6 box at x 6..16, y 10..16: columns 0|1|2 get 2, 8, 0 px; rows: all in row 1
    w = build.patch_weights([6, 10, 16, 16])
    assert w[6] == pytest.approx(2 / 10) and w[7] == pytest.approx(8 / 10) and sum(w) == pytest.approx(1.0)


def test_word_positions_find_the_target_colour_in_the_prompt() -> None:
    from rlvr.models.byte_tokenizer import build_byte_tokenizer

    tok = build_byte_tokenizer()
    ids = tok("Q: Click the blue button: give", add_special_tokens=False)["input_ids"]
    pos = build.word_positions(tok, ids, "the blue button", "blue")
    assert tok.decode([ids[i] for i in pos]) == "blue" and pos == [13, 14, 15, 16]


def test_attention_guide_loss_is_minus_log_mass_on_the_target() -> None:
    T, image = 8, 9
    ids = torch.tensor([[1, image, image, image, image, 2, 3, 4]])
    labels = torch.full((1, T), -100)
    labels[0, 6:] = 5  # tokens 6 and 7 are the answer: predicted from positions 5 and 6
    attn = torch.zeros(1, 1, T, T)
    attn[0, 0, 5, 1] = 0.5  # position 5 puts half its mass on image token 0 (patch 0), rest elsewhere
    attn[0, 0, 5, 0] = 0.5
    attn[0, 0, 6, 1] = 0.25
    attn[0, 0, 6, 3] = 0.75  # patch 2, not in the target
    box = [0, 0, 8, 8]  # patch 0 only (36 patches exist; the toy prompt holds 4 image tokens)
    build.IMAGE_SIZE, saved = 16, build.IMAGE_SIZE  # a 2x2 patch grid for this toy example
    try:
        loss = build.attention_guide_loss([attn], {"input_ids": ids, "labels": labels}, [[(None, 0, box)]], image,
                                          [0], 0)
        # one answer token only (token 1, predicted from position 6): -log 0.25
        one = build.attention_guide_loss([attn], {"input_ids": ids, "labels": labels}, [[(1, 0, box)]], image,
                                         [0], 0)
    finally:
        build.IMAGE_SIZE = saved
    assert loss.item() == pytest.approx(-(math.log(0.5 + 1e-6) + math.log(0.25 + 1e-6)) / 2, rel=1e-5)
    assert one.item() == pytest.approx(-math.log(0.25 + 1e-6), rel=1e-5)
    assert build.attention_guide_loss([attn], {"input_ids": ids, "labels": labels}, [None], image, [0], 0) is None


def test_guide_targets_point_each_answer_number_at_its_tile_or_frame() -> None:
    from types import SimpleNamespace

    record = SimpleNamespace(answer=[3, 4, 20, 12])
    assert build.guide_targets("vl_click", record, " (9, 8)") == [(None, 0, [3, 4, 20, 12])]
    assert build.guide_targets("vl_count", record, " rs: 1") is None
    # " 2 4 1 3": number k is completion token 2k + 1; shown tile t (1-4, reading order) is a 24x24 quarter
    jig = build.guide_targets("vl_jigsaw", record, " 2 4 1 3")
    assert jig == [(1, 0, [24, 0, 48, 24]), (3, 0, [24, 24, 48, 48]), (5, 0, [0, 0, 24, 24]),
                   (7, 0, [0, 24, 24, 48])]
    # frames: the number names the image (frame) to look at, all of it
    assert build.guide_targets("vl_frames", record, " 3 1 2") == [(1, 2, [0, 0, 48, 48]), (3, 0, [0, 0, 48, 48]),
                                                                  (5, 1, [0, 0, 48, 48])]


def test_sincos_positions_code_rows_and_columns() -> None:
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration, Qwen2Config

    torch.manual_seed(0)
    config = LlavaConfig(vision_config=CLIPVisionConfig(**build.VISION),
                         text_config=Qwen2Config(vocab_size=16, hidden_size=16, intermediate_size=32,
                                                 num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1),
                         image_token_index=15, vision_feature_layer=0)
    model = LlavaForConditionalGeneration(config)
    table = model.model.vision_tower.embeddings.position_embedding.weight
    cls_before = table[0].clone()
    build.sincos_positions(model, 1.0)
    q = table.shape[1] // 4
    assert torch.equal(table[0], cls_before)  # the class position is left alone
    # patch (row 0, col 0): sin 0 = 0, cos 0 = 1 for both halves
    assert torch.allclose(table[1], torch.cat([torch.zeros(q), torch.ones(q), torch.zeros(q), torch.ones(q)]))
    # patch 7 is row 1, col 1: the column code equals the row code
    assert torch.allclose(table[8, : 2 * q], table[8, 2 * q :])
    assert not torch.allclose(table[2], table[7])  # (0, 1) and (1, 0) differ


def test_teacher_right_per_task() -> None:
    assert build.parse_teacher_right("0.8") == {"*": 0.8}
    assert build.parse_teacher_right("vl_click=0.7,vl_jigsaw=0.4") == {"*": build.TEACHER_RIGHT, "vl_click": 0.7,
                                                                       "vl_jigsaw": 0.4}
    for bad in ("vl_click=high", "1.5", "vl_click=-0.1"):
        with pytest.raises(ValueError):
            build.parse_teacher_right(bad)


def test_bind_guide_leads_the_named_buttons_tokens_to_the_colour_word() -> None:
    # 2x2 patch grid (16x16 image): target button in patch 0, another button in patch 3; word at position 1
    T, image = 8, 9
    ids = torch.tensor([[1, 2, 3, image, image, image, image, 4]])
    attn = torch.zeros(1, 1, T, T)
    attn[0, 0, 3, 1] = 0.8  # target token (patch 0, position 3) reads the word with mass 0.8
    attn[0, 0, 3, 0] = 0.2
    attn[0, 0, 6, 1] = 0.3  # the other button's token (patch 3, position 6) reads it with 0.3
    attn[0, 0, 6, 0] = 0.7
    build.IMAGE_SIZE, saved = 16, build.IMAGE_SIZE
    try:
        loss = build.bind_guide_loss([attn], {"input_ids": ids}, [[(None, 0, [0, 0, 8, 8])]], [[[8, 8, 16, 16]]],
                                     [[1]], image, [0], 0)
        skipped = build.bind_guide_loss([attn], {"input_ids": ids}, [[(1, 0, [0, 0, 8, 8])]], [[]], [[1]], image,
                                        [0], 0)
    finally:
        build.IMAGE_SIZE = saved
    want = (-math.log(0.8 + 1e-6) - math.log(1 - 0.3 + 1e-6)) / 2
    assert loss.item() == pytest.approx(want, rel=1e-5)
    assert skipped is None  # per-token targets (jigsaw, frames) have no colour word to bind


def test_bind_guide_targets_for_ground_are_the_red_square_and_its_distractors() -> None:
    from rlvr.tasks import build_task

    task = build_task("vl_ground", {"seed": 3, "eval_size": 2, "distractors": 4})
    record = next(r for r in task.train[:50] if r.meta["distractors"])
    others = build.other_boxes("vl_ground", record)
    assert others == [list(box) for _s, _c, box in record.meta["distractors"]]
    assert list(record.answer) not in others
    assert build.target_words("vl_ground", record) == ("the red square", "red square")
    assert build.guide_targets("vl_ground", record, " [1, 2, 3, 4]") == [(None, 0, list(record.answer))]
    assert build.other_boxes("vl_count", record) == []
