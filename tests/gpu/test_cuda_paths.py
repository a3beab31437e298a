"""The CUDA-only paths, for the first person with a GPU: `make gpu-check`. Skipped on machines without CUDA
(every machine this project has run on so far, so these tests have NEVER been executed; see docs/scaling.md).

- vLLM sleep mode (colocated with the learner: sleep while it trains, wake to generate);
- vLLM in bf16 against the learner's bf16 log-probs;
- the NCCL weight broadcast to a Ray rollout worker on a GPU;
- a short GRPO run with vLLM on the GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make gpu-check)")]

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "recipes" / "grpo.yaml"
# bf16 has an 8-bit mantissa: per-op relative error up to 2^-8; over a few layers log-probs agree to ~0.1.
BF16_LOGPROB_ATOL = 0.15


def _vllm():
    from rlvr.rollout.vllm_engine import vllm_status

    usable, why = vllm_status()
    if not usable:
        pytest.fail(f"vLLM cannot run on this GPU machine: {why}")


def _builtin(dtype):
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.models.loading import BUILTIN_DIR

    return (load_causal_lm(str(BUILTIN_DIR), dtype=dtype, device=torch.device("cuda")),
            load_tokenizer(str(BUILTIN_DIR)))


def test_vllm_sleeps_and_wakes_around_a_weight_sync():
    _vllm()
    from rlvr.rollout.base import SamplingParams, build_engine

    policy, tok = _builtin(torch.float32)
    engine = build_engine("vllm", {"colocate": True, "gpu_memory_utilization": 0.3}, 64, policy, tok)
    try:
        assert engine.colocate
        engine.sync_weights(policy, 1)
        assert engine._asleep  # asleep between steps: the learner has the memory
        free_asleep = torch.cuda.mem_get_info()[0]
        groups = engine.generate([tok.encode("12+34=")], SamplingParams(n=4, max_new_tokens=16))
        assert engine._asleep and len(groups[0]) == 4
        assert all(s.policy_version == 1 for s in groups[0])
        assert torch.cuda.mem_get_info()[0] >= 0.9 * free_asleep
    finally:
        engine.shutdown()


def test_vllm_bf16_logprobs_match_the_learner():
    _vllm()
    from rlvr.rollout.base import SamplingParams, build_engine

    policy, tok = _builtin(torch.bfloat16)
    engine = build_engine("vllm", {"colocate": False, "gpu_memory_utilization": 0.3}, 64, policy, tok)
    try:
        engine.sync_weights(policy, 0)
        torch.manual_seed(0)
        for s in engine.generate([tok.encode("12+34=")], SamplingParams(n=4, max_new_tokens=16))[0]:
            ids = torch.tensor([s.prompt_ids + s.response_ids], device="cuda")
            with torch.no_grad():
                logits = policy(ids).logits[0, len(s.prompt_ids) - 1:-1].float()
            ref = logits.log_softmax(-1).gather(-1, torch.tensor(s.response_ids, device="cuda")[:, None])[:, 0]
            assert (ref.cpu() - torch.tensor(s.logprobs)).abs().max() < BF16_LOGPROB_ATOL
    finally:
        engine.shutdown()


def test_grpo_with_vllm_on_a_gpu_and_nccl_broadcast_to_a_ray_worker(tmp_path):
    _vllm()
    ray = pytest.importorskip("ray")
    from rlvr.config import load_config
    from rlvr.tracking import read_metrics
    from rlvr.trainer.loop import train

    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        run = train(load_config(GRPO, [
            f"run.dir={tmp_path / 'run'}", "logging.progress=false", "eval.before=false", "eval.after=false",
            "train.steps=3", "rollout.engine=vllm", "model.device=cuda",
            "rollout.engine_options={colocate: false, gpu_memory_utilization: 0.3}",
            "distributed.backend=ray", "distributed.rollout_workers=1", "distributed.gpus_per_rollout_worker=1",
            "distributed.weight_sync=broadcast"]))
    finally:
        ray.shutdown()
    metrics = read_metrics(run)
    assert len(metrics) == 3
    assert all(m["distributed/weight_broadcast"] == 1.0 for m in metrics)
    assert all(m["rollout/logprob_abs_diff"] < BF16_LOGPROB_ATOL for m in metrics)
