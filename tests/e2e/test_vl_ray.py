"""Image prompts through the Ray workers: rollout workers, the reference worker and learner ranks.

Tolerance for log-probs computed in another process against this one's (fp32, the same torch kernels and
weights, different batch shapes and padding): rounding only. As derived in tests/unit/test_vlm_rl.py, the longest
reduction in builtin-vl's text model is its 384-long MLP down projection, ~384 * 2^-24 ~ 2.3e-5 relative, which
4 layers and the log-softmax compound to ~1e-4 at most.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from rlvr.config import load_config  # noqa: E402
from rlvr.models import load_tokenizer  # noqa: E402
from rlvr.models.logprobs import forward_tokens  # noqa: E402
from rlvr.models.vision import load_processor, load_vlm_for_training  # noqa: E402
from rlvr.rollout import SamplingParams, rollout_groups  # noqa: E402
from rlvr.tasks import PromptRenderer, build_task  # noqa: E402
from rlvr.tracking import read_metrics  # noqa: E402
from rlvr.trainer.loop import train  # noqa: E402
from rlvr.types import Batch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LOGPROB_ATOL = 1e-4  # see the module docstring
VL = ["task.name=vl_count", "model.path=builtin-vl", "rollout.engine=hf", "distributed.backend=ray"]


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_rollout_and_reference_workers_match_the_in_process_logprobs():
    from rlvr.distributed.ray_engine import RayEngine
    from rlvr.distributed.ray_groups import RemoteReference

    cfg = load_config(None, [*VL, "distributed.rollout_workers=1", "distributed.cpus_per_rollout_worker=1",
                             "distributed.reference_worker=true", "distributed.cpus_per_reference_worker=1",
                             "algorithm.kl_coef=0.01", "train.micro_batch_size=4"])
    task = build_task("vl_count", {"eval_size": 3, "train_size": 3})
    tok, processor = load_tokenizer("builtin-vl"), load_processor("builtin-vl")
    model = load_vlm_for_training("builtin-vl", trainable=False)
    engine, ref = RayEngine(cfg, "builtin-vl"), RemoteReference(cfg, "builtin-vl")
    try:
        torch.manual_seed(0)
        groups = rollout_groups(engine, PromptRenderer(task, tok, "auto", processor), task.heldout[:3],
                                SamplingParams(n=3, max_new_tokens=12))
        assert [len(g.samples) for g in groups] == [3, 3, 3]
        assert len({id(s.mm_inputs) for g in groups for s in g.samples}) == 3  # one dict per prompt, shared
        batch = Batch.from_groups(groups, tok.pad_token_id)
        with torch.no_grad():
            local = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, 1.0,
                                   mm_inputs=batch.mm_inputs).logprobs
        assert batch.mask.sum() > 20
        assert float(((local - batch.old_logprobs).abs() * batch.mask).max()) < LOGPROB_ATOL  # the workers' own
        remote = ref.token_logprobs(batch, 1.0)
        assert float(((local - remote).abs() * batch.mask).max()) < LOGPROB_ATOL
        # without the images, the same tokens get other log-probs: the workers did use them
        blank = [{"pixel_values": torch.zeros_like(m["pixel_values"])} for m in batch.mm_inputs]
        with torch.no_grad():
            no_image = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, 1.0,
                                      mm_inputs=blank).logprobs
        assert float(((no_image - batch.old_logprobs).abs() * batch.mask).max()) > 0.01
    finally:
        engine.shutdown()
        ref.close()


@pytest.mark.slow
def test_asynchronous_training_with_rollout_workers_and_a_learner_rank_on_images(tmp_path):
    """Two rollout workers (4 prompts: 2 each, with their own pixel values), one learner rank holding the policy
    and the KL reference as VLMs, one step of staleness."""
    small = ["train.steps=3", "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=16",
             "task.eval_size=4", "eval.before=false", "eval.after=false", "logging.progress=false",
             "checkpoint.every=0", "algorithm.kl_coef=0.01", "train.mini_batches=1"]
    run = train(load_config(ROOT / "recipes" / "perception_r1.yaml", [
        f"run.dir={tmp_path / 'run'}", *small, "distributed.backend=ray", "distributed.rollout_workers=2",
        "distributed.cpus_per_rollout_worker=0.5", "distributed.learner_workers=1", "distributed.num_cpus=2",
        "distributed.mode=async", "distributed.max_staleness=1"]))
    metrics = read_metrics(run)
    assert len(metrics) == 3
    for m in metrics:
        assert all(math.isfinite(m[k]) for k in ("pg_loss", "grad_norm", "kl", "reward_mean"))
    # the first batch is fresh: the learner rank's log-probs of the workers' tokens are the same numbers
    assert metrics[0]["async/staleness_0"] == 1.0 and metrics[0]["rollout/logprob_abs_diff"] < LOGPROB_ATOL
    assert all(m["async/staleness_1"] == 1.0 for m in metrics[1:])  # then one policy version behind
    assert metrics[-1]["kl"] > 0  # the rank's reference (a VLM too) was used
    assert (run / "final" / "model.safetensors").is_file()
