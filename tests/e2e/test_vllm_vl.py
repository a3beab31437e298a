"""rollout.engine=vllm with images, for real: builtin-vl (LLaVA) on vLLM's CPU platform, trained with GRPO.

What it checks: the engine takes the prompts' expanded image tokens with their decoded images, and its
behaviour log-probs are the learner's (which merges the image features itself) at every step, after every
weight sync, with the vision tower trained too (so the tower's renamed weights reach vLLM). Tolerance as in
tests/e2e/test_vllm.py (fp32, different kernels, ~1e-4 at most for builtin-vl's reductions).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_required import require_vllm

require_vllm()

from rlvr.config import load_config  # noqa: E402
from rlvr.tracking import read_metrics  # noqa: E402
from rlvr.trainer.loop import train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LOGPROB_ATOL = 1e-4
pytestmark = pytest.mark.slow


def test_vlm_grpo_on_vllm_samples_what_the_learner_scores(tmp_path):
    # two-frame clips (two images per prompt: each image's expanded tokens go back to one placeholder for vLLM)
    cfg = load_config(ROOT / "recipes" / "vlm_grpo.yaml", [
        f"run.dir={tmp_path / 'run'}", "task.name=vl_count_frames", "rollout.engine=vllm",
        "rollout.engine_options={kv_cache_gb: 0.25}", "model.freeze_vision_tower=false", "train.steps=3",
        "train.prompts_per_step=4", "rollout.n=4", "eval.before=false", "eval.after=false", "checkpoint.every=0",
        "logging.progress=false"])
    run = train(cfg)
    metrics = read_metrics(run)
    assert len(metrics) == 3
    # The learner merges the image features itself; equal log-probs mean vLLM sampled with the same images and
    # the same (synced, tower included) weights. Sent with the expanded placeholders as they are, vLLM's
    # log-probs were 4-7 nats off.
    gaps = [m["rollout/logprob_abs_diff"] for m in metrics]
    assert all(g < LOGPROB_ATOL for g in gaps), gaps
    assert all(m["images_skipped_total"] == 0 for m in metrics)


def test_a_ray_rollout_worker_runs_vllm_with_images(tmp_path):
    """The same on a Ray rollout worker that holds its own vLLM engine: each step's prompts go to the worker with
    their decoded images, and every weight update reaches it (equal log-probs at every step)."""
    ray = pytest.importorskip("ray")
    cfg = load_config(ROOT / "recipes" / "gui_r1.yaml", [
        f"run.dir={tmp_path / 'run'}", "rollout.engine=vllm", "rollout.engine_options={kv_cache_gb: 0.25}",
        "train.steps=3", "train.prompts_per_step=8", "rollout.n=4", "eval.before=false", "eval.after=false",
        "checkpoint.every=0", "logging.progress=false", "optim.lr=1e-3", "distributed.backend=ray",
        "distributed.rollout_workers=1", "distributed.num_cpus=2"])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run = train(cfg)
    finally:
        ray.shutdown()
    metrics = read_metrics(run)
    # 8 screens x 4 clicks: a step whose every group is all right or all wrong (no gradient) is unlikely (~1e-4)
    assert len(metrics) == 3 and all(m["grad_norm"] > 0 for m in metrics)
    gaps = [m["rollout/logprob_abs_diff"] for m in metrics]
    assert all(g < LOGPROB_ATOL for g in gaps), gaps  # steps 2-3 sampled from the synced weights
    assert all(m["distributed/rollout_worker_restarts"] == 0 for m in metrics)
    assert (run / "final" / "model.safetensors").is_file()
