"""Model loading: the shipped model, local HF checkpoints, chat templates, dtype/device, and clear errors."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.models import (
    BUILTIN_DIR,
    ModelError,
    check_vocab,
    eos_token_ids,
    load_causal_lm,
    load_tokenizer,
    resolve_device,
    resolve_dtype,
    resolve_model_path,
)
from rlvr.tasks import PromptRenderer, build_task


def test_builtin_model_loads_with_plain_transformers():
    model = AutoModelForCausalLM.from_pretrained(str(BUILTIN_DIR))
    tok = AutoTokenizer.from_pretrained(str(BUILTIN_DIR))
    assert model.config.model_type == "qwen2"
    ids = tok("4821+397=")["input_ids"]
    assert len(ids) == len("4821+397=")  # one token per character
    assert tok.decode(ids) == "4821+397="
    assert tok.eos_token_id is not None
    weights = BUILTIN_DIR / "model.safetensors"
    assert weights.stat().st_size <= 15 * 1024 * 1024
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tok))


def test_builtin_model_knows_its_task():
    """Greedy decoding is (nearly always) right; sampling is careless: that is the room RL has."""
    tok = load_tokenizer("builtin")
    model = load_causal_lm("builtin", trainable=False)
    ids = torch.tensor([tok("4821+397=")["input_ids"]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=80, do_sample=False,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert text.endswith("A:5218"), text


def test_builtin_path_and_build_info():
    assert resolve_model_path("builtin") == BUILTIN_DIR
    info = json.loads((BUILTIN_DIR / "build_info.json").read_text())
    assert 0.15 <= info["heldout_eval"]["pass@1"] <= 0.50
    assert info["heldout_eval"]["pass@16"] >= 2 * info["heldout_eval"]["pass@1"]


def test_missing_directory_error_names_the_key(tmp_path):
    with pytest.raises(ModelError, match=r"model\.path: model directory .* does not exist"):
        resolve_model_path(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model_path(tmp_path / "empty")


def test_tokenizer_without_eos_is_rejected(no_eos_model_dir):
    with pytest.raises(ModelError, match="no EOS token"):
        load_tokenizer(no_eos_model_dir)


def test_pad_falls_back_to_eos_and_eos_ids_include_generation_config(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    model = load_causal_lm(tiny_model_dir)
    assert tok.pad_token_id is not None
    model.generation_config.eos_token_id = [tok.eos_token_id, 5]
    assert eos_token_ids(tok, model) == sorted({tok.eos_token_id, 5})


def test_vocab_mismatch_is_caught(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    model = load_causal_lm(tiny_model_dir)
    model.resize_token_embeddings(10)
    with pytest.raises(ModelError, match="do not belong together"):
        check_vocab(tok, model)


def test_chat_template_is_used_when_present(tiny_chat_model_dir, tiny_model_dir):
    task = build_task("addition", {"eval_size": 5})
    record = task.heldout[0]
    chat = PromptRenderer(task, load_tokenizer(tiny_chat_model_dir))
    assert chat.uses_chat
    ids, text = chat.render(record)
    assert text.startswith("<|user|>") and text.endswith("<|assistant|>")
    assert record.question in text
    plain = PromptRenderer(task, load_tokenizer(tiny_model_dir))
    assert not plain.uses_chat
    assert plain.render(record)[1] == f"{record.question}="


def test_dtype_and_device_resolution():
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("bfloat16", cpu) == torch.bfloat16
    assert resolve_device("cpu") == cpu
    if not torch.cuda.is_available():
        assert resolve_device("auto") == cpu
        with pytest.raises(ModelError, match="no CUDA device"):
            resolve_device("cuda")


def test_reference_model_is_frozen(tiny_model_dir):
    ref = load_causal_lm(tiny_model_dir, trainable=False)
    assert not ref.training
    assert not any(p.requires_grad for p in ref.parameters())
