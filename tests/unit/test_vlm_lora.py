"""LoRA on a vision-language policy (builtin-vl + model.lora): adapters on the language model's linear layers only,
the vision tower frozen and never adapted, the projector trained in full unless `model.freeze_projector`, and a
`final/` that transformers loads back as a VLM holding the merged weights.

Tolerance of "LoRA at init == base": peft initialises B = 0, so each adapted layer adds an exact zero to the base
layer's output and the log-probs should agree bit for bit; the bound used, 1e-6, is still far below the 1e-4 that
fp32 rounding over builtin-vl's longest reduction (the 384-long MLP down projection, 4 layers) could reach if a
different kernel were taken (see test_vlm_rl.py), so a real change of the function cannot hide under it.
"""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.config import Config, ConfigError, load_config
from rlvr.learner.learner import Learner
from rlvr.models import load_tokenizer
from rlvr.models.logprobs import forward_tokens
from rlvr.models.lora import exportable, load_lora_state
from rlvr.models.vision import load_processor, load_vlm_for_training, projector, vision_tower
from rlvr.roles.placement import load_policy
from rlvr.rollout import SamplingParams, build_engine, rollout_groups
from rlvr.tasks import PromptRenderer, build_task
from rlvr.trainer.checkpoint import load_trainer_state
from rlvr.trainer.preflight import preflight
from rlvr.types import Batch

INIT_ATOL = 1e-6  # see the module docstring
BASE = ["task.name=vl_count", "model.path=builtin-vl", "rollout.engine=hf", "task.eval_size=4", "task.train_size=8"]


def _policy(*overrides: str):
    cfg = load_config(None, [*BASE, "model.lora={r: 4, alpha: 8}", *overrides])
    torch.manual_seed(0)
    return load_policy(cfg, load_tokenizer("builtin-vl"), torch.device("cpu"), torch.float32, None), cfg


def _batch(model, n=4):
    tok, processor = load_tokenizer("builtin-vl"), load_processor("builtin-vl")
    task = build_task("vl_count", {"eval_size": 2, "train_size": 2})
    torch.manual_seed(0)
    groups = rollout_groups(build_engine("hf", {}, 64, model, tok), PromptRenderer(task, tok, "auto", processor),
                            task.heldout[:2], SamplingParams(n=n, max_new_tokens=12))
    for g in groups:
        for i, s in enumerate(g.samples):
            s.advantage = 1.0 if i % 2 else -1.0
    return Batch.from_groups(groups, tok.pad_token_id)


def test_only_language_adapters_and_the_projector_train():
    policy, _ = _policy()
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "multi_modal_projector.modules_to_save" in n for n in trainable)
    adapted = {n.split(".lora_")[0] for n in trainable if "lora_" in n}
    assert all(".language_model." in n for n in adapted)
    assert len(adapted) == 4 * 7  # 4 layers x (q, k, v, o, gate, up, down): every language linear, no lm_head
    assert not any("lora_" in n for n, _ in vision_tower(policy).named_parameters())
    assert not any(p.requires_grad for p in vision_tower(policy).parameters())

    frozen, _ = _policy("model.freeze_projector=true")
    assert all("lora_" in n for n, p in frozen.named_parameters() if p.requires_grad)
    only_q, _ = _policy("model.lora={r: 4, target_modules: [q_proj]}")
    names = {n.split(".lora_")[0] for n, p in only_q.named_parameters() if p.requires_grad and "lora_" in n}
    assert len(names) == 4 and all(n.endswith("self_attn.q_proj") and ".language_model." in n for n in names)


def test_lora_logprobs_at_init_equal_the_base_and_one_step_trains_adapters_not_the_tower():
    base = load_vlm_for_training("builtin-vl")
    policy, _ = _policy()
    batch = _batch(policy)
    with torch.no_grad():
        ours = forward_tokens(policy, batch.input_ids, batch.attention_mask, batch.mask, mm_inputs=batch.mm_inputs)
        theirs = forward_tokens(base, batch.input_ids, batch.attention_mask, batch.mask, mm_inputs=batch.mm_inputs)
    assert batch.mask.sum() > 20
    torch.testing.assert_close(ours.logprobs * batch.mask, theirs.logprobs * batch.mask, atol=INIT_ATOL, rtol=0)
    # the engine sampled through the wrapped model: its log-probs are the learner's (test_vlm_rl.py's bound)
    assert float(((ours.logprobs - batch.old_logprobs).abs() * batch.mask).max()) < 1e-4

    tower = copy.deepcopy(vision_tower(policy).state_dict())
    proj = {k: v.clone() for k, v in projector(policy).state_dict().items()}
    params = {n: p.detach().clone() for n, p in policy.named_parameters()}
    cfg = Config.model_validate({"train": {"steps": 1}, "optim": {"lr": 1e-2}, "rollout": {"n": 4}})
    stats = Learner(policy, cfg).update(batch)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values() if isinstance(v, float))
    assert all(torch.equal(v, vision_tower(policy).state_dict()[k]) for k, v in tower.items())
    after = dict(policy.named_parameters())
    moved = {n for n in params if not torch.equal(params[n], after[n].detach())}
    assert moved and all("lora_B" in n or "lora_A" in n or "modules_to_save" in n for n in moved)
    assert any("lora_B" in n for n in moved) and any("modules_to_save" in n for n in moved)
    assert any(not torch.equal(v, projector(policy).state_dict()[k]) for k, v in proj.items())


def test_lora_vlm_run_exports_a_merged_vlm_checkpoints_the_projector_and_resumes_bit_exactly(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from rlvr.tracking import read_metrics
    from rlvr.trainer.loop import train

    common = [*BASE, "model.lora={r: 4, alpha: 8}", "train.steps=2", "train.prompts_per_step=2", "rollout.n=4",
              "rollout.max_new_tokens=12", "optim.lr=1e-2", "checkpoint.every=1", "eval.before=false",
              "eval.after=false", "logging.progress=false", "algorithm.kl_coef=0.01"]  # a reference too
    run = train(load_config(None, [*common, f"run.dir={tmp_path / 'run'}"]))
    metrics = read_metrics(run)
    assert len(metrics) == 2 and all(m["rollout/logprob_abs_diff"] < 1e-4 for m in metrics)
    assert all(torch.isfinite(torch.tensor(m["pg_loss"])) for m in metrics)

    final = run / "final"
    model = AutoModelForImageTextToText.from_pretrained(str(final), local_files_only=True)
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert AutoProcessor.from_pretrained(str(final), local_files_only=True).image_token == "<image>"
    assert not (final / "adapter_config.json").exists()
    saved = load_file(str(final / "model.safetensors"))
    assert not any("lora_" in k or "modules_to_save" in k or "original_module" in k for k in saved)
    weights, base = model.state_dict(), load_vlm_for_training("builtin-vl").state_dict()
    assert set(weights) == set(base)
    changed = {k for k in weights if not torch.equal(weights[k], base[k])}
    assert any(".language_model." in k for k in changed) and any("multi_modal_projector" in k for k in changed)
    assert not any("vision_tower" in k or "embed_tokens" in k or "norm" in k for k in changed)

    # the adapter state in the checkpoint (adapters + the projector's trained copy) rebuilds final/ exactly
    state = load_trainer_state(run / "checkpoints" / "step_000002")
    assert any("multi_modal_projector" in k for k in state["lora"])
    rebuilt, _ = _policy()
    load_lora_state(rebuilt, state["lora"])
    merged = exportable(rebuilt).state_dict()
    assert all(torch.equal(merged[k], weights[k]) for k in weights)

    # interrupted after step 1 and resumed: the same metrics and the same final weights, bit for bit
    part = train(load_config(None, [*common, f"run.dir={tmp_path / 'part'}"]), stop_after=1)
    resumed = train(load_config(part / "config.yaml", [f"run.dir={part}"]), resume=True)
    strip = [{k: v for k, v in m.items() if not k.endswith(("_s", "tokens_per_s"))} for m in metrics]
    assert strip == [{k: v for k, v in m.items() if not k.endswith(("_s", "tokens_per_s"))}
                     for m in read_metrics(resumed)]
    again = load_file(str(resumed / "final" / "model.safetensors"))
    assert all(torch.equal(again[k], saved[k]) for k in saved)


def test_lora_with_an_image_task_passes_preflight_and_bad_combinations_are_named():
    preflight(load_config(None, [*BASE, "model.lora={r: 4}"]), multi_rank=False)
    cfg = load_config(None, [*BASE, "model.lora={r: 4}", "model.freeze_vision_tower=false"])
    with pytest.raises(ConfigError, match="model.freeze_vision_tower: LoRA on a vision-language model"):
        preflight(cfg, multi_rank=False)
    with pytest.raises(ValueError, match=r"model.lora.target_modules: .*no_such_proj.*q_proj"):
        _policy("model.lora={r: 4, target_modules: [no_such_proj]}")
    with pytest.raises(ValueError, match=r"model.lora.target_modules: .*out_proj"):  # a vision-tower-only name
        _policy("model.lora={r: 4, target_modules: [out_proj]}")
