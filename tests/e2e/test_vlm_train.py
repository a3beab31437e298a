"""`rlvr train recipes/vlm_grpo.yaml`, shortened: builtin-vl learns vl_count on CPU, final/ loads back with the
Auto classes, and `rlvr eval` evaluates it on the image task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.eval.run import run_eval
from rlvr.tracking import read_metrics
from rlvr.trainer.loop import train

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # ~75 s on a quiet 2-core machine (12 steps, two held-out evaluations)


def test_vlm_grpo_raises_heldout_pass_at_1_and_final_loads_back(tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    cfg = load_config(ROOT / "recipes" / "vlm_grpo.yaml", [
        f"run.dir={tmp_path / 'run'}", "train.steps=12", "task.eval_size=100", "eval.n=4", "eval.ks=[1,4]",
        "checkpoint.every=6", "logging.progress=false"])
    run = train(cfg)
    metrics = read_metrics(run)
    assert len(metrics) == 12
    assert all(m["rollout/logprob_abs_diff"] < 1e-4 for m in metrics)  # learner == engine, with the images
    assert all(m["images_skipped_total"] == 0 for m in metrics)
    before = json.loads((run / "eval_before.json").read_text())["pass@k"]["1"]
    after = json.loads((run / "eval_after.json").read_text())["pass@k"]["1"]
    print(f"held-out pass@1 before {before:.3f} after {after:.3f}")
    assert after > before + 0.03, (before, after)

    final = run / "final"
    model = AutoModelForImageTextToText.from_pretrained(str(final), local_files_only=True)
    processor = AutoProcessor.from_pretrained(str(final), local_files_only=True)
    assert type(model).__name__ == "LlavaForConditionalGeneration" and processor.image_token == "<image>"
    assert (run / "checkpoints").is_dir()
    eval_cfg = load_config(ROOT / "recipes" / "vlm_grpo.yaml", ["eval.n=4", "eval.ks=[1]", "eval.size=40",
                                                                 "logging.progress=false"])
    result = run_eval(eval_cfg, str(final), tmp_path / "eval.json")
    assert result["num_prompts"] == 40 and 0.0 <= result["pass@k"]["1"] <= 1.0


def _comparable(rows):
    return [{k: v for k, v in r.items() if not k.endswith(("_s", "tokens_per_s"))} for r in rows]


def test_vlm_resume_is_bit_exact(tmp_path):
    from safetensors.torch import load_file

    common = ["train.steps=3", "train.prompts_per_step=4", "rollout.n=4", "checkpoint.every=1",
              "eval.before=false", "eval.after=false", "logging.progress=false", "algorithm.kl_coef=0.01"]
    straight = train(load_config(ROOT / "recipes" / "vlm_grpo.yaml", [f"run.dir={tmp_path / 'a'}", *common]))
    part = train(load_config(ROOT / "recipes" / "vlm_grpo.yaml", [f"run.dir={tmp_path / 'b'}", *common]),
                 stop_after=2)
    resumed = train(load_config(part / "config.yaml", [f"run.dir={part}"]), resume=True)
    assert _comparable(read_metrics(straight)) == _comparable(read_metrics(resumed))
    assert all(m["kl"] >= 0 for m in read_metrics(straight))  # the reference (a VLM too) scored the images
    wa = load_file(str(straight / "final" / "model.safetensors"))
    wb = load_file(str(resumed / "final" / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
