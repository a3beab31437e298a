"""A distillation teacher on image tasks: a vision-language teacher scores the student's sampled tokens given the
same images (KDRL, on-policy distillation, GKD's full distributions); what is not wired with images stops before
the run.

The check that the images reach the teacher: with the teacher a copy of the student (builtin-vl), its token
log-probs equal the student's, so KDRL's reverse KL is zero up to fp32 rounding (the module docstring of
tests/unit/test_vlm_rl.py derives ~1e-4 for one log-prob of builtin-vl; a k2 estimate is a square of such
differences). A teacher that saw the prompt without its image would differ by far more: a blank image moves
builtin-vl's log-probs by more than 0.1 (tests/unit/test_vlm_rl.py::test_the_image_is_used).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.tracking import read_metrics
from rlvr.trainer.loop import train
from rlvr.trainer.preflight import preflight

ROOT = Path(__file__).resolve().parents[2]
VL = ["task.name=vl_count", "model.path=builtin-vl", "model.teacher_path=builtin-vl", "rollout.engine=hf",
      "task.eval_size=2"]


def test_kdrl_with_a_vision_language_teacher_sees_the_images(tmp_path):
    cfg = load_config(ROOT / "recipes" / "kdrl.yaml", [
        *VL, f"run.dir={tmp_path / 'run'}", "train.steps=1", "train.prompts_per_step=2", "rollout.n=2",
        "rollout.max_new_tokens=12", "eval.before=false", "eval.after=false", "logging.progress=false",
        "checkpoint.every=0", "algorithm.loss.kd_masking=none"])
    (m,) = read_metrics(train(cfg))
    assert m["train_tokens"] > 0
    assert abs(m["teacher_kl"]) < 1e-6, m["teacher_kl"]  # k2 = (log-ratio)^2 / 2 of ~1e-4-sized ratios at most


@pytest.mark.parametrize("lmbda", [1.0, 0.0])  # the student's samples; the task's reference answers
def test_gkd_with_a_vision_language_teacher_sees_the_images(tmp_path, lmbda):
    """GKD's JSD over full next-token distributions is zero (fp32 rounding) when the teacher is a copy of the student
    and both see each prompt's images, on the student's samples and on the dataset steps' reference answers."""
    cfg = load_config(ROOT / "recipes" / "gkd.yaml", [
        *VL, f"run.dir={tmp_path / 'run'}", "train.steps=1", "train.prompts_per_step=2", "rollout.n=2",
        "rollout.max_new_tokens=12", "eval.before=false", "eval.after=false", "logging.progress=false",
        "checkpoint.every=0", f"sampling.lmbda={lmbda}"])
    (m,) = read_metrics(train(cfg))
    assert m["train_tokens"] > 0 and m["sampling/student_samples"] == lmbda
    assert abs(m["gkd_jsd"]) < 1e-6, m["gkd_jsd"]


def test_gkd_reference_answers_on_an_image_task_carry_the_prompts_pixels():
    from rlvr.models import load_tokenizer
    from rlvr.models.vision import load_processor
    from rlvr.sampling import SAMPLERS, StepContext
    from rlvr.tasks import PromptRenderer, build_task

    task = build_task("vl_count", {"eval_size": 2, "train_size": 8})
    tok = load_tokenizer("builtin-vl")
    renderer = PromptRenderer(task, tok, "auto", load_processor("builtin-vl"))
    sampler = SAMPLERS.build("gkd", {"lmbda": 0.0}, prompts=task.train, seed=0)
    ctx = StepContext(step=1, prompts_per_step=3, n=2, rollout=lambda records, n: [], task=task, tokenizer=tok,
                      renderer=renderer, score=lambda groups: None)
    groups, metrics = sampler.next_batch(ctx)
    assert len(groups) == 3 and metrics["student_samples"] == 0.0
    for g in groups:
        (sample,) = g.samples
        assert sample.mm_inputs is not None and "pixel_values" in sample.mm_inputs
        assert sample.prompt_ids == renderer.render_multimodal(g.record)[0]
        assert task.verify(sample.text, g.record).correct  # the reference answer in builtin-vl's layout


@pytest.mark.parametrize("recipe, overrides, match", [
    ("gkd.yaml", ["sampling.off_policy=teacher"], r"sampling.off_policy: teacher outputs are sampled without images"),
    ("kdrl.yaml", ["model.teacher_path=builtin-teacher"], r"teacher tokenizer 'builtin-teacher'"),
])
def test_what_is_not_wired_with_images_stops_before_the_run(recipe, overrides, match):
    cfg = load_config(ROOT / "recipes" / recipe, [*VL, *overrides])
    with pytest.raises((ConfigError, ValueError), match=match):
        preflight(cfg, multi_rank=False)


def test_luffy_guidance_on_an_image_task_carries_the_groups_images():
    from rlvr.models import load_tokenizer
    from rlvr.models.vision import load_processor, load_vlm_for_training
    from rlvr.rollout import SamplingParams, build_engine, rollout_groups
    from rlvr.sampling import SAMPLERS, StepContext
    from rlvr.tasks import PromptRenderer, build_task

    # builtin-vl never learned boxes, and 8 new tokens cannot hold one: every group fails
    task = build_task("vl_ground", {"eval_size": 2, "train_size": 4})
    tok = load_tokenizer("builtin-vl")
    policy = load_vlm_for_training("builtin-vl", trainable=False)
    renderer = PromptRenderer(task, tok, "auto", load_processor("builtin-vl"))
    engine = build_engine("hf", {}, 64, policy, tok)

    def rollout(records, n):
        groups = rollout_groups(engine, renderer, records, SamplingParams(n=n, max_new_tokens=8))
        score(groups)
        return groups

    def score(groups):
        for g in groups:
            for s in g.samples:
                s.correct = task.verify(s.text, g.record).correct
                s.reward = float(s.correct)

    sampler = SAMPLERS.build("luffy", {"trigger": "all_fail", "select": "likelihood", "num_guidance": 1},
                             prompts=task.train, seed=0)
    ctx = StepContext(step=1, prompts_per_step=2, n=3, rollout=rollout, task=task, tokenizer=tok,
                      renderer=renderer, score=score, policy=policy)
    torch.manual_seed(0)
    groups, metrics = sampler.next_batch(ctx)
    assert metrics["guided_groups"] == 2.0
    for g in groups:
        guide = g.samples[-1]
        assert guide.meta.get("off_policy") and guide.correct
        assert guide.mm_inputs is g.samples[0].mm_inputs and "pixel_values" in guide.mm_inputs
    # `select: likelihood` scores candidates with the images: a blank image gives another score
    from rlvr.sampling.guidance import mean_token_logprob

    guide = groups[0].samples[-1]
    (seen,) = mean_token_logprob(policy, [guide])
    guide.mm_inputs = {"pixel_values": torch.zeros_like(guide.mm_inputs["pixel_values"])}
    (blank,) = mean_token_logprob(policy, [guide])
    assert seen < 0 and abs(seen - blank) > 1e-3
