"""A distillation teacher on image tasks: a vision-language teacher scores the student's sampled tokens given the
same images (KDRL, on-policy distillation); what is not wired with images stops before the run.

The check that the images reach the teacher: with the teacher a copy of the student (builtin-vl), its token
log-probs equal the student's, so KDRL's reverse KL is zero up to fp32 rounding (the module docstring of
tests/unit/test_vlm_rl.py derives ~1e-4 for one log-prob of builtin-vl; a k2 estimate is a square of such
differences). A teacher that saw the prompt without its image would differ by far more: a blank image moves
builtin-vl's log-probs by more than 0.1 (tests/unit/test_vlm_rl.py::test_the_image_is_used).
"""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.parametrize("recipe, overrides, match", [
    ("gkd.yaml", [], r"algorithm.loss: gkd compares full next-token distributions.*kdrl, on_policy_distill"),
    ("gkd.yaml", ["sampling.off_policy=teacher"], r"algorithm.loss|sampling.off_policy"),
    ("kdrl.yaml", ["model.teacher_path=builtin-teacher"], r"teacher tokenizer 'builtin-teacher'"),
])
def test_what_is_not_wired_with_images_stops_before_the_run(recipe, overrides, match):
    cfg = load_config(ROOT / "recipes" / recipe, [*VL, *overrides])
    with pytest.raises((ConfigError, ValueError), match=match):
        preflight(cfg, multi_rank=False)
