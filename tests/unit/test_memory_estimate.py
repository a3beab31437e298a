"""The pre-training memory estimate (trainer/memory.py): the logits term follows the response positions a
micro-batch really has, and a config that cannot fit fails naming the biggest term's knob."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.config import Config
from rlvr.trainer.memory import LOGITS_CHUNK, check_memory, estimate_memory


@pytest.fixture
def big_vocab_model(tmp_path):
    """A config.json with a Qwen2.5-sized vocabulary and a 1 MB weights file (the estimate reads only these)."""
    arch = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 151936, "torch_dtype": "float32"}
    (tmp_path / "config.json").write_text(json.dumps(arch))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 2**20)
    return tmp_path


def _cfg(path, micro_batch_size: int, max_new_tokens: int) -> Config:
    return Config.model_validate({"model": {"path": str(path)},
                                  "train": {"prompts_per_step": 4, "micro_batch_size": micro_batch_size},
                                  "rollout": {"n": 4, "max_new_tokens": max_new_tokens}})


def _term(cfg: Config, name: str) -> float:
    return next(t.bytes for t in estimate_memory(cfg, torch.device("cpu"), torch.float32) if t.name == name)


def test_logits_chunk_is_the_micro_batch_response_positions(big_vocab_model):
    # 8 rows x 32 new tokens = 256 response positions: logits, log-softmax and its gradient, fp32
    assert _term(_cfg(big_vocab_model, 8, 32), "logits chunk") == 3.0 * 8 * 32 * 151936 * 4


def test_logits_chunk_is_capped_at_the_chunk_size(big_vocab_model):
    assert _term(_cfg(big_vocab_model, 16, 1024), "logits chunk") == 3.0 * LOGITS_CHUNK * 151936 * 4


def test_a_config_that_cannot_fit_names_the_knob(big_vocab_model):
    with pytest.raises(MemoryError, match=r"about .* GiB on cpu but 0\.00 GiB is free(.|\n)*lower"):
        check_memory(_cfg(big_vocab_model, 16, 1024), torch.device("cpu"), torch.float32, available=1.0)
