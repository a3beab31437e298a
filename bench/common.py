"""Shared pieces of the benchmarks: the two models, the addition prompts, peak RSS, timing."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
CACHE = ROOT / "runs" / "bench-cache"

# The 0.5B model: Qwen2.5-0.5B's architecture, randomly initialised (nothing is downloaded).
QWEN05B_ARCH = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                    num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                    max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6)
# A ~25M Qwen2 (hidden 512, 8 layers; head_dim 64 and GQA as in Qwen2.5), randomly initialised: between the
# built-in model (0.8M) and the 0.5B one, for the engines' crossover. 25.1M parameters with the tied 2,048 vocab.
QWEN25M_ARCH = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                    num_key_value_heads=2, vocab_size=2048, tie_word_embeddings=True,
                    max_position_embeddings=2048, rope_theta=1000000.0, rms_norm_eps=1e-6)
# The built-in model's architecture (0.8M), randomly initialised: it seldom samples EOS, so its rows run to
# max_new_tokens like the two above, which the scaling table needs (the trained model stops at ~34 tokens).
TINY_ARCH = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=257, tie_word_embeddings=True,
                 max_position_embeddings=512, rope_theta=10000.0, rms_norm_eps=1e-6)
RANDOM_MODELS = {"qwen0.5b": ("qwen0.5b-arch-random", QWEN05B_ARCH), "qwen25m": ("qwen25m-random", QWEN25M_ARCH),
                 "tiny": ("tiny-random", TINY_ARCH)}


def model_dir(name: str) -> Path:
    """A local HF directory for `name`: 'builtin' (the shipped model), or 'qwen0.5b' / 'qwen25m' / 'tiny'
    (random weights, built once into runs/bench-cache/)."""
    if name == "builtin":
        from rlvr.models.loading import BUILTIN_DIR

        return BUILTIN_DIR
    if name not in RANDOM_MODELS:
        raise ValueError(f"unknown bench model {name!r}; choose builtin or one of {', '.join(RANDOM_MODELS)}")
    dirname, arch = RANDOM_MODELS[name]
    path = CACHE / dirname
    if (path / "model.safetensors").is_file():
        return path
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from rlvr.models.byte_tokenizer import save_byte_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    tok = save_byte_tokenizer(path)  # byte tokenizer: inputs only use its ids, the model's vocab is larger
    torch.manual_seed(0)
    config = Qwen2Config(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.eos_token_id, **arch)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(str(path), safe_serialization=True)
    return path


def addition_records(count: int, offset: int = 0) -> list[Any]:
    from rlvr.tasks import build_task

    task = build_task("addition", {})
    return [task.train[offset + i] for i in range(count)]


def prompt_text(record: Any) -> str:
    """The prompt rlvr's renderer makes for the addition task without a chat template ("a+b=")."""
    return f"{record.question}="


def share_rewards(prompts: list[str], completions: list[str], share: float,
                  completion_ids: list[list[int]] | None = None) -> list[float]:
    """A reward for measuring speed at a set share of all-equal groups (the same function on both sides of a
    comparison). The distinct prompts of the call are ranked by a hash of their text; the first
    round(share * count) of them get reward 0 on every completion (an all-equal group: advantage 0); every
    other completion gets a pseudo-random 0 or 1 from a hash of prompt and completion (all-equal only by
    chance, 2 in 2^n for n samples). The rewards carry no learning signal: this measures work, not learning.
    `completion_ids`, when given, join the hash: a random model with a vocabulary larger than its tokenizer's
    (the 0.5B architecture with the byte tokenizer) samples ids that decode to the same text."""
    import hashlib

    if completion_ids is not None:
        completions = [f"{c}\x00{list(ids)}" for c, ids in zip(completions, completion_ids)]

    def digest(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8", "replace")).digest()

    distinct = sorted(dict.fromkeys(prompts), key=digest)
    equal = set(distinct[: round(share * len(distinct))])
    return [0.0 if p in equal else float(digest(p + "\x00" + c)[0] & 1) for p, c in zip(prompts, completions)]


def all_equal_share(prompts: list[str], rewards: list[float]) -> float:
    """The share of prompts (groups) whose rewards are all the same in this call."""
    by_prompt: dict[str, set[float]] = {}
    for p, r in zip(prompts, rewards):
        by_prompt.setdefault(p, set()).add(r)
    return sum(len(v) == 1 for v in by_prompt.values()) / max(len(by_prompt), 1)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def num_params(model: Any) -> int:
    """Parameters counted once (tied embedding / LM head once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def emit(result: dict[str, Any]) -> None:
    """Workers print one JSON line, prefixed so the parent can find it among library chatter."""
    result.setdefault("peak_rss_mb", peak_rss_mb())
    print("BENCH_RESULT " + json.dumps(result), flush=True)


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.start


def threads() -> int:
    import torch

    return torch.get_num_threads()


def environ_summary() -> dict[str, Any]:
    import platform

    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpus": os.cpu_count()}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import trl

        info["trl"] = trl.__version__
    except ImportError:
        info["trl"] = None
    return info
