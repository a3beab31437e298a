"""A critic (value model) on image tasks: PPO with GAE on builtin-vl, the critic a separate vision-language copy
or a value head on the policy, each reading the prompt's images.

The check that the critic sees the images: with a non-zero value head, a blank image moves the values (builtin-vl's
log-probs move by more than 0.1 for a blank image, tests/unit/test_vlm_rl.py::test_the_image_is_used, and the
values read the same hidden states).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.learner.critic import build_critic
from rlvr.models import load_tokenizer
from rlvr.models.logprobs import forward_tokens
from rlvr.models.vision import load_processor, load_vlm_for_training, vision_tower
from rlvr.rollout import SamplingParams, build_engine, rollout_groups
from rlvr.tasks import PromptRenderer, build_task
from rlvr.tracking import read_metrics
from rlvr.trainer.loop import train
from rlvr.types import Batch

ROOT = Path(__file__).resolve().parents[2]
VL = ["task.name=vl_count", "model.path=builtin-vl", "rollout.engine=hf", "task.eval_size=2", "train.steps=2",
      "train.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=12", "eval.before=false",
      "eval.after=false", "logging.progress=false", "checkpoint.every=0", "algorithm.critic.warmup_steps=1"]


@pytest.mark.parametrize("kind", ["separate", "head"])
def test_ppo_gae_with_a_critic_trains_on_an_image_task(tmp_path, kind):
    cfg = load_config(ROOT / "recipes" / "ppo_gae.yaml", [*VL, f"run.dir={tmp_path / 'run'}",
                                                          f"algorithm.critic.kind={kind}"])
    metrics = read_metrics(train(cfg))
    assert len(metrics) == 2
    assert all(math.isfinite(m["value_loss"]) and m["value_loss"] >= 0 for m in metrics)
    assert any(m["value_loss"] > 0 for m in metrics)  # 0 only while the returns and the zero-init values are 0
    assert metrics[0]["critic_only"] == 1.0 and metrics[1]["critic_only"] == 0.0
    assert all(m["rollout/logprob_abs_diff"] < 1e-4 for m in metrics)


@pytest.mark.parametrize("kind", ["separate", "head"])
def test_the_critic_reads_the_images(kind):
    cfg = load_config(ROOT / "recipes" / "ppo_gae.yaml", [*VL, f"algorithm.critic.kind={kind}"])
    policy = load_vlm_for_training("builtin-vl")
    critic = build_critic(cfg, policy, torch.float32, torch.device("cpu"))
    if kind == "separate":  # its own copy: tower frozen, like the policy's
        assert not any(p.requires_grad for p in vision_tower(critic.backbone).parameters())
    torch.manual_seed(0)
    torch.nn.init.normal_(critic.head.proj.weight, std=0.1)  # it starts at zero; any non-zero head shows it
    task = build_task("vl_count", {"eval_size": 2, "train_size": 2})
    tok = load_tokenizer("builtin-vl")
    engine = build_engine("hf", {}, 64, policy, tok)
    renderer = PromptRenderer(task, tok, "auto", load_processor("builtin-vl"))
    torch.manual_seed(0)
    groups = rollout_groups(engine, renderer, task.heldout[:2], SamplingParams(n=2, max_new_tokens=8))
    batch = Batch.from_groups(groups, tok.pad_token_id)
    blank = [{"pixel_values": torch.zeros_like(m["pixel_values"])} for m in batch.mm_inputs]

    def values(mm):
        with torch.no_grad():
            if critic.separate:
                return critic.values(dataclasses.replace(batch, mm_inputs=mm))
            return forward_tokens(policy, batch.input_ids, batch.attention_mask, batch.mask, value_head=critic.head,
                                  mm_inputs=mm).values

    real, dark = values(batch.mm_inputs), values(blank)
    assert float((real * batch.mask).abs().max()) > 0
    assert float(((real - dark).abs() * batch.mask).max()) > 1e-3

