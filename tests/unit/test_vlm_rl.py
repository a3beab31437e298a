"""Vision-language RL on builtin-vl: image prompts through the hf engine, the learner and the reference.

Tolerance for engine vs learner log-probs (fp32, same torch kernels, different batch shapes and padding: the
engine left-pads n copies of each prompt and decodes with a KV cache, the learner runs right-padded whole
rows): they differ by rounding only. The longest reduction in builtin-vl's text model is the MLP's 384-long
down projection (the projector's are 64 and 128 long); fp32 rounding over it is at most ~384 * 2^-24 ~ 2.3e-5
relative, and 4 layers plus the log-softmax compound that to ~1e-4 at most. Measured here: ~3e-6.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch

from rlvr.config import Config, ConfigError, load_config
from rlvr.learner.learner import Learner
from rlvr.learner.logprob_model import LocalLogProbModel
from rlvr.models import load_tokenizer
from rlvr.models.logprobs import forward_tokens
from rlvr.models.vision import load_processor, load_vlm_for_training, projector, vision_tower
from rlvr.rollout import SamplingParams, build_engine, rollout_groups
from rlvr.tasks import PromptRenderer, build_task
from rlvr.tasks.images import ImageError
from rlvr.trainer.preflight import preflight
from rlvr.types import Batch, TaskRecord

LOGPROB_ATOL = 1e-4  # see the module docstring


@pytest.fixture(scope="module")
def vl():
    model = load_vlm_for_training("builtin-vl")
    return model, load_processor("builtin-vl"), load_tokenizer("builtin-vl")


@pytest.fixture(scope="module")
def task():
    return build_task("vl_count", {"eval_size": 6, "train_size": 6})


class TowerCalls:
    """Counts vision-tower forwards and the images each one encodes."""

    def __init__(self, model):
        self.calls: list[int] = []
        self.handle = vision_tower(model).register_forward_hook(
            lambda module, args, out: self.calls.append(int(args[0].shape[0])))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def _rollout(vl, task, records, n=4, max_new_tokens=12, engine="hf"):
    model, processor, tok = vl
    engine = build_engine(engine, {}, 64, model, tok)
    renderer = PromptRenderer(task, tok, "auto", processor)
    torch.manual_seed(0)
    return rollout_groups(engine, renderer, records, SamplingParams(n=n, max_new_tokens=max_new_tokens)), renderer


def test_learner_logprobs_with_images_equal_the_engines(vl, task):
    model, _, tok = vl
    groups, _ = _rollout(vl, task, task.heldout[:3])
    assert all(s.mm_inputs is g.samples[0].mm_inputs for g in groups for s in g.samples)  # shared, not copied
    batch = Batch.from_groups(groups, tok.pad_token_id)
    assert batch.multimodal and len(batch.mm_inputs) == len(batch)
    with torch.no_grad():
        out = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, 1.0, mm_inputs=batch.mm_inputs)
    gap = ((out.logprobs - batch.old_logprobs).abs() * batch.mask).max()
    assert batch.mask.sum() > 20 and float(gap) < LOGPROB_ATOL
    # the reference role (a frozen copy) gives the same numbers
    ref = LocalLogProbModel(copy.deepcopy(model).requires_grad_(False), micro_batch_size=5)
    torch.testing.assert_close(ref.token_logprobs(batch, 1.0) * batch.mask, out.logprobs * batch.mask,
                               atol=LOGPROB_ATOL, rtol=0)


def test_the_image_is_used(vl, task):
    model, _, tok = vl
    groups, _ = _rollout(vl, task, task.heldout[:2])
    batch = Batch.from_groups(groups, tok.pad_token_id)
    blank = [{"pixel_values": torch.zeros_like(m["pixel_values"])} for m in batch.mm_inputs]
    other = [batch.mm_inputs[-1]] * len(batch)  # every row gets the second prompt's image
    with torch.no_grad():
        real = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, mm_inputs=batch.mm_inputs)
        lp_blank = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, mm_inputs=blank)
        lp_other = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, mm_inputs=other)
    first = batch.group_ids == 0
    assert float(((real.logprobs - lp_blank.logprobs).abs() * batch.mask).max()) > 0.1
    assert float(((real.logprobs - lp_other.logprobs)[first].abs() * batch.mask[first]).max()) > 0.01


@pytest.mark.parametrize("engine", ["hf", "fast"])  # fast: its KV-cache path is text-only, it falls back to hf's
def test_vision_tower_runs_once_per_prompt(vl, task, engine):
    model, _, tok = vl
    with TowerCalls(model) as tower:
        groups, _ = _rollout(vl, task, task.heldout[:3], n=6, engine=engine)
    assert [len(g.samples) for g in groups] == [6, 6, 6]
    assert sum(tower.calls) == 3  # 3 prompts x 1 image, not 3 x 6 samples
    batch = Batch.from_groups(groups, tok.pad_token_id)
    with TowerCalls(model) as tower, torch.no_grad():
        forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, mm_inputs=batch.mm_inputs)
    assert sum(tower.calls) == 3


def test_multimodal_rows_are_not_packed(vl, task):
    model, _, tok = vl
    groups, _ = _rollout(vl, task, task.heldout[:2])
    batch = Batch.from_groups(groups, tok.pad_token_id)
    with torch.no_grad():
        padded = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, mm_inputs=batch.mm_inputs)
        packed = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, mm_inputs=batch.mm_inputs,
                                pack_tokens=4096)
    assert torch.equal(padded.logprobs, packed.logprobs)
    sub = batch.select([1, 5])
    assert sub.mm_inputs == [batch.mm_inputs[1], batch.mm_inputs[5]]


def test_update_trains_projector_and_language_model_not_the_frozen_tower(vl, task):
    model, _, tok = vl
    policy = copy.deepcopy(model).train()
    assert not any(p.requires_grad for p in vision_tower(policy).parameters())
    groups, _ = _rollout(vl, task, task.heldout[:2])
    for g in groups:
        for i, s in enumerate(g.samples):
            s.advantage = 1.0 if i % 2 else -1.0
    batch = Batch.from_groups(groups, tok.pad_token_id)
    cfg = Config.model_validate({"train": {"steps": 1, "pack_tokens": 4096}, "optim": {"lr": 1e-3},
                                 "rollout": {"n": 4}})
    tower_before = copy.deepcopy(vision_tower(policy).state_dict())
    proj_before = copy.deepcopy(projector(policy).state_dict())
    stats = Learner(policy, cfg).update(batch)
    assert stats["rollout/logprob_abs_diff"] < LOGPROB_ATOL
    assert all(torch.equal(v, vision_tower(policy).state_dict()[k]) for k, v in tower_before.items())
    assert any(not torch.equal(v, projector(policy).state_dict()[k]) for k, v in proj_before.items())
    frozen = load_vlm_for_training("builtin-vl", freeze_projector=True)
    assert not any(p.requires_grad for p in projector(frozen).parameters())


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (48, 48), (255, 255, 255)).save(buf, format="PNG")
    return buf.getvalue()


def test_a_broken_image_is_skipped_and_counted(vl, task):
    good = TaskRecord(id="good", question="How many shapes are in the image?", answer=0, images=[_png()])
    broken = TaskRecord(id="broken", question="How many shapes are in the image?", answer=0,
                        images=[b"not an image"])
    groups, renderer = _rollout(vl, task, [good, broken, task.heldout[0]], n=2)
    assert [g.record.id for g in groups] == ["good", task.heldout[0].id]
    assert len(renderer.skipped_images) == 1 and renderer.skipped_images[0][0] == "broken"
    assert "cannot be decoded" in renderer.skipped_images[0][1]


def test_placeholder_mismatch_is_an_error(vl):
    _, processor, tok = vl
    task = build_task("vl_count", {"eval_size": 2, "train_size": 2,
                                   "chat_prompt_template": "<image> {question}"})
    renderer = PromptRenderer(task, tok, "auto", processor)
    with pytest.raises(ImageError, match="2 '<image>' placeholder"):
        renderer.render_multimodal(task.heldout[0])
    cfg = load_config(None, ["task.name=vl_count", "task.chat_prompt_template=<image> {question}",
                             "model.path=builtin-vl", "rollout.engine=hf", "task.eval_size=2"])
    with pytest.raises(ConfigError, match="placeholder.*task.chat_prompt_template"):
        preflight(cfg, multi_rank=False)


@pytest.mark.parametrize("override, match", [
    ("model.path=builtin", r"model.path: 'builtin' is a text-only model .*model.path=builtin-vl"),
    ("sampling.name=cure", r"sampling.name: the cure sampler .* without the images"),
])
def test_bad_vision_configs_fail_before_the_run(override, match):
    base = ["task.name=vl_count", "model.path=builtin-vl", "rollout.engine=hf", "task.eval_size=2"]
    cfg = load_config(None, [*base, override])
    with pytest.raises(ConfigError, match=match):
        preflight(cfg, multi_rank=False)


@pytest.mark.parametrize("overrides", [
    ["distributed.backend=ray", "distributed.rollout_workers=2"],
    ["distributed.backend=ray", "distributed.learner_workers=2", "distributed.mode=async",
     "distributed.reward_workers=1"],
    ["distributed.backend=ray", "distributed.reference_worker=true", "algorithm.kl_coef=0.01"],
])
def test_ray_workers_take_image_tasks(overrides):
    """Ray workers carry images now (tests/e2e/test_vl_ray.py): the preflight lets these configs through."""
    cfg = load_config(None, ["task.name=vl_count", "model.path=builtin-vl", "rollout.engine=hf",
                             "task.eval_size=2", *overrides])
    preflight(cfg, multi_rank=False)


def test_text_model_renderer_refuses_an_image_task(task):
    from rlvr.tasks.base import TaskError

    with pytest.raises(TaskError, match="needs a vision-language model"):
        PromptRenderer(task, load_tokenizer("builtin"))
