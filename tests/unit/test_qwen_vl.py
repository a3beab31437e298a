"""Qwen2-VL and Qwen2.5-VL checkpoints (tiny, random-init, built here) through rlvr's image path.

These families place image tokens on a 2D grid of rotary positions (M-RoPE). rlvr merges image features into the
token embeddings once per prompt and builds the positions itself (`rlvr.models.vision.position_ids`), so the
reference here is the model's own forward on `input_ids` + `pixel_values`, which does both internally.

Tolerances: fp32 throughout. The two paths compute the same sums in a different order (one image's features
merged into a padded batch against one row at a time), so logits agree to a few fp32 ulps of their magnitude
(~1): 1e-5. Sampled log-probs against the learner's: the same bound as builtin-vl's tests (1e-4): a log-softmax
over 262 logits recomputed in another batch shape.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from tiny_vlms import make_tiny_qwen_vl

from rlvr.config import Config
from rlvr.learner.learner import Learner
from rlvr.models.logprobs import forward_tokens
from rlvr.models.vision import (
    image_only_processor,
    load_processor,
    load_vlm_for_training,
    position_ids,
    projector,
    vision_tower,
)
from rlvr.rollout import SamplingParams, build_engine, rollout_groups
from rlvr.tasks import PromptRenderer, build_task
from rlvr.types import Batch

LOGIT_ATOL = 1e-5
LOGPROB_ATOL = 1e-4


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl"])
def qvl(request, tmp_path_factory):
    path = make_tiny_qwen_vl(tmp_path_factory.mktemp(request.param), family=request.param)
    processor = load_processor(path)
    return path, load_vlm_for_training(path), processor


@pytest.fixture(scope="module")
def task():
    return build_task("vl_count", {"eval_size": 6, "train_size": 6})


def _rollout(qvl, task, records, n=4, max_new_tokens=10):
    _, model, processor = qvl
    engine = build_engine("hf", {}, 64, model, processor.tokenizer)
    renderer = PromptRenderer(task, processor.tokenizer, "auto", processor)
    torch.manual_seed(0)
    return rollout_groups(engine, renderer, records, SamplingParams(n=n, max_new_tokens=max_new_tokens))


def test_the_processor_loads_without_torchvision_and_round_trips(qvl, task, tmp_path):
    path, _, processor = qvl
    assert processor.video_processor is None  # built without transformers' (torchvision-only) video processor
    renderer = PromptRenderer(task, processor.tokenizer, "auto", processor)
    ids, text, mm = renderer.render_multimodal(task.heldout[0])
    assert text.count("<|image_pad|>") == 1
    grid = mm["image_grid_thw"]
    assert grid.tolist() == [[1, 6, 6]]  # a 48x48 image: 6x6 patches of 8 pixels
    assert ids.count(processor.image_token_id) == 9  # merged 2x2: 36 / 4 tokens
    processor.save_pretrained(str(tmp_path))
    (tmp_path / "config.json").write_text((Path(path) / "config.json").read_text())
    again = load_processor(tmp_path)
    ids2, _, mm2 = PromptRenderer(task, again.tokenizer, "auto", again).render_multimodal(task.heldout[0])
    assert ids2 == ids and torch.equal(mm2["pixel_values"], mm["pixel_values"])
    assert image_only_processor(Path(path).parent) is None  # no processor there: the original error is raised


def test_forward_with_images_equals_the_models_own_forward(qvl, task):
    _, model, processor = qvl
    renderer = PromptRenderer(task, processor.tokenizer, "auto", processor)
    rendered = [renderer.render_multimodal(r) for r in task.heldout[:2]]
    tail = [65, 66, 67, 68, 69]
    rows = [torch.tensor(ids + tail[: 2 + 3 * i]) for i, (ids, _, _) in enumerate(rendered)]  # unequal lengths
    width = max(len(r) for r in rows)
    input_ids = torch.zeros(2, width, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for i, r in enumerate(rows):  # right-padded, as the learner's batches are
        input_ids[i, : len(r)], attention[i, : len(r)] = r, 1
    mm_rows = [mm for _, _, mm in rendered]
    mask = attention.clone()
    with torch.no_grad():
        ours = forward_tokens(model, input_ids, attention, mask, mm_inputs=mm_rows).logprobs
        for i, r in enumerate(rows):
            model.model.rope_deltas = None
            own = model(input_ids=r[None], attention_mask=torch.ones(1, len(r), dtype=torch.long),
                        pixel_values=mm_rows[i]["pixel_values"], image_grid_thw=mm_rows[i]["image_grid_thw"],
                        mm_token_type_ids=(r[None] == model.config.image_token_id).int()).logits[0]
            ref = torch.log_softmax(own[:-1].float(), -1).gather(1, r[1:, None]).squeeze(1)
            torch.testing.assert_close(ours[i, 1 : len(r)], ref, atol=LOGIT_ATOL, rtol=0)
        # M-RoPE is really in play: plain 1D positions give other numbers
        positions = position_ids(model, input_ids, attention, mm_rows)
        assert positions.shape == (3, 2, width)
        image = input_ids[0] == model.config.image_token_id
        assert len(set(positions[1, 0, image].tolist())) == 3  # 6x6 patches merged 2x2: 3 rows of image tokens
        flat = model.model.language_model(inputs_embeds=model.get_input_embeddings()(input_ids),
                                          attention_mask=attention).last_hidden_state
        assert flat.shape[1] == width


def test_sampled_logprobs_equal_the_learners_and_the_tower_runs_once_per_prompt(qvl, task):
    _, model, processor = qvl
    calls = []
    handle = vision_tower(model).register_forward_hook(lambda *a: calls.append(1))
    try:
        groups = _rollout(qvl, task, task.heldout[:3], n=5)
    finally:
        handle.remove()
    assert len(calls) == 3  # 3 prompts x 1 image, not 3 x 5 samples
    batch = Batch.from_groups(groups, processor.tokenizer.pad_token_id)
    assert batch.mask.sum() > 30
    with torch.no_grad():
        out = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, 1.0,
                             mm_inputs=batch.mm_inputs)
    gap = ((out.logprobs - batch.old_logprobs).abs() * batch.mask).max()
    assert float(gap) < LOGPROB_ATOL


def test_an_update_trains_merger_and_language_model_not_the_frozen_tower(qvl, task):
    _, model, processor = qvl
    policy = copy.deepcopy(model).train()
    merger = {id(p) for p in projector(policy).parameters()}
    tower = [p for p in vision_tower(policy).parameters() if id(p) not in merger]
    assert tower and not any(p.requires_grad for p in tower)
    assert all(p.requires_grad for p in projector(policy).parameters())
    groups = _rollout(qvl, task, task.heldout[:2])
    for g in groups:
        for i, s in enumerate(g.samples):
            s.advantage = 1.0 if i % 2 else -1.0
    batch = Batch.from_groups(groups, processor.tokenizer.pad_token_id)
    cfg = Config.model_validate({"train": {"steps": 1}, "optim": {"lr": 1e-3}, "rollout": {"n": 4}})
    tower_before = [p.detach().clone() for p in tower]
    merger_before = [p.detach().clone() for p in projector(policy).parameters()]
    stats = Learner(policy, cfg).update(batch)
    assert stats["rollout/logprob_abs_diff"] < LOGPROB_ATOL
    assert all(torch.equal(a, b) for a, b in zip(tower_before, tower))
    assert any(not torch.equal(a, b) for a, b in zip(merger_before, projector(policy).parameters()))


def test_image_slots_take_the_first_placeholders_of_each_row():
    from rlvr.models.vision import image_slots

    ids = torch.tensor([[5, 9, 9, 7, 9, 0], [9, 1, 9, 9, 9, 9], [1, 2, 3, 4, 0, 0]])
    slots = image_slots(ids, 9, [2, 3, 0])  # row 0: a sampled 9 at column 4; row 1: two sampled 9s at the end
    assert slots.int().tolist() == [[0, 1, 1, 0, 0, 0], [1, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]]
    with pytest.raises(ValueError, match="row 2: 0 image placeholder tokens for 1 image features"):
        image_slots(ids, 9, [2, 3, 1])


def test_a_sampled_image_token_is_an_ordinary_token(qvl, task):
    """A policy may emit its image token in a response (this random-init one does): the learner embeds it as text,
    as the engine did when it sampled the tokens after it, instead of failing mid-run."""
    _, model, processor = qvl
    renderer = PromptRenderer(task, processor.tokenizer, "auto", processor)
    ids, _, mm = renderer.render_multimodal(task.heldout[0])
    image = model.config.image_token_id
    row = torch.tensor([ids + [65, image, 66, image, 67]])
    with torch.no_grad():
        from rlvr.models.vision import multimodal_embeds

        embeds = multimodal_embeds(model, row, [mm])
        plain = model.get_input_embeddings()(row)
        torch.testing.assert_close(embeds[0, len(ids):], plain[0, len(ids):], atol=0, rtol=0)
        assert not torch.equal(embeds[0, : len(ids)], plain[0, : len(ids)])
        out = forward_tokens(model, row, torch.ones_like(row), torch.ones_like(row), mm_inputs=[mm])
    assert torch.isfinite(out.logprobs).all()
