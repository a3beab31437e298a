"""A checkpoint laid out like Qwen2.5-Instruct (ChatML template, two EOS ids, opinionated generation_config)
trains unchanged: prompts go through the chat template, responses stop at either EOS, and the model's own
sampling defaults (repetition penalty, top-k) do not leak into rollouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.models import eos_token_ids, load_causal_lm, load_tokenizer
from rlvr.models.logprobs import token_logprobs
from rlvr.rollout import SamplingParams
from rlvr.rollout.hf import HFEngine
from rlvr.tasks import PromptRenderer, build_task
from rlvr.tracking import read_metrics
from rlvr.trainer.loop import train
from rlvr.types import Batch, Group, TaskRecord

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
    " + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def qwen_like_dir(tmp_path_factory) -> Path:
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from rlvr.models.byte_tokenizer import build_byte_tokenizer

    path = tmp_path_factory.mktemp("qwen_like")
    tok = build_byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.pad_token = "<|endoftext|>"
    tok.chat_template = CHATML
    tok.save_pretrained(str(path))
    torch.manual_seed(0)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    endoftext = tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         eos_token_id=im_end, pad_token_id=endoftext)
    model = Qwen2ForCausalLM(config)
    # Qwen2.5-Instruct ships sampling defaults like these; rlvr must not inherit them.
    model.generation_config = GenerationConfig(eos_token_id=[im_end, endoftext], pad_token_id=endoftext,
                                               do_sample=True, temperature=0.7, top_p=0.8, top_k=3,
                                               repetition_penalty=1.5)
    model.save_pretrained(str(path))
    return path


def test_chat_template_and_both_eos_ids(qwen_like_dir):
    tok = load_tokenizer(qwen_like_dir)
    model = load_causal_lm(qwen_like_dir)
    assert eos_token_ids(tok, model) == sorted({tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id})
    task = build_task("addition", {"eval_size": 4})
    ids, text = PromptRenderer(task, tok).render(task.heldout[0])
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")


def test_model_sampling_defaults_do_not_leak(qwen_like_dir):
    tok = load_tokenizer(qwen_like_dir)
    model = load_causal_lm(qwen_like_dir)
    engine = HFEngine(model, tok)
    prompt = tok("12+34=")["input_ids"]
    torch.manual_seed(0)
    samples = engine.generate([prompt], SamplingParams(n=8, temperature=1.0, max_new_tokens=12))[0]
    for s in samples:
        s.advantage = 0.0
    batch = Batch.from_groups([Group(TaskRecord(id="0", question=""), prompt, samples)], pad_id=tok.pad_token_id)
    with torch.no_grad():
        lp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask, 1.0)
    m = batch.mask.bool()
    # with top_k=3 / repetition penalty applied, recorded log-probs would not be the model's own
    torch.testing.assert_close(lp[m], batch.old_logprobs[m], atol=2e-4, rtol=0)
    # a random model under top_k=3 would use at most 3 distinct tokens per position; we see more overall
    assert len({t for s in samples for t in s.response_ids}) > 3
    assert model.generation_config.top_k == 3  # the model's own config is left as it was


def test_one_training_step_through_the_chat_path(qwen_like_dir, tmp_path):
    cfg = load_config(None, [f"model.path={qwen_like_dir}", f"run.dir={tmp_path / 'run'}", "train.steps=2",
                             "train.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=8",
                             "logging.progress=false", "optim.lr=1e-3"])
    run = train(cfg)
    metrics = read_metrics(run)
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(torch.isfinite(torch.tensor(m["grad_norm"])) for m in metrics)
    saved = json.loads((run / "final" / "generation_config.json").read_text())
    assert saved["top_k"] == 3  # exported unchanged
