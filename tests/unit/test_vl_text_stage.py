"""LMM-R1's two stages on builtin-vl (recipes/lmm_r1.yaml, one multi-stage recipe): a vision-language model trains
and is evaluated on a text-only task through its language path, its final/ stays a vision-language checkpoint
(processor included), and stage 2 trains from it on images."""

from __future__ import annotations

from pathlib import Path

from rlvr.config import load_config
from rlvr.config.stages import load_stages
from rlvr.eval.run import run_eval
from rlvr.models.vision import is_vision_checkpoint, load_processor
from rlvr.tasks import build_task
from rlvr.tracking import read_metrics
from rlvr.trainer.stages import run_stages

ROOT = Path(__file__).resolve().parents[2]
TINY = ["train.steps=1", "train.prompts_per_step=2", "rollout.n=2", "train.mini_batches=1", "eval.before=false",
        "eval.after=false", "checkpoint.every=0", "logging.progress=false", "rollout.max_new_tokens=12"]


def test_vl_count_text_is_the_counting_question_in_words():
    task = build_task("vl_count_text", {"eval_size": 3, "train_size": 3})
    assert task.visual is False
    for r in task.heldout:
        assert r.images is None and r.question.endswith("How many shapes are in the image?")
        assert r.question.count(",") + r.question.count(" and ") == int(r.answer) - 1  # one listed shape each
    assert task.verify(f" rs: {task.heldout[0].answer}", task.heldout[0]).correct


def test_lmm_r1_text_stage_then_multimodal_stage(tmp_path):
    staged = load_stages(ROOT / "recipes/lmm_r1.yaml", [f"run.dir={tmp_path}", *TINY])
    text, multimodal = staged.stages
    assert (text.cfg.task.name, multimodal.cfg.task.name) == ("vl_count_text", "vl_count")
    run_stages(staged)
    stage1 = Path(text.cfg.run.dir)
    final = stage1 / "final"
    assert is_vision_checkpoint(final)  # the vision tower came along through the text stage
    assert load_processor(final).image_processor is not None  # and the processor was saved with it
    assert len(read_metrics(stage1)) == 1

    # evaluation of a VLM on a text task runs its language path (it used to be refused)
    cfg = load_config(stage1 / "config.yaml", ["eval.size=2", "eval.n=2", "eval.ks=[1,2]"])
    result = run_eval(cfg, str(final), None)
    assert result["num_prompts"] == 2 and result["n"] == 2

    stage2 = Path(multimodal.cfg.run.dir)
    assert load_config(stage2 / "config.yaml").model.path == str(final)  # stage 2 started from stage 1's model
    assert read_metrics(stage2)[0]["images_skipped_total"] == 0.0  # an image task ran on the stage-1 model
