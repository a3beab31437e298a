"""A memory estimate made before training starts, so a config that obviously cannot fit stops at once,
naming the knob to turn, instead of dying of OOM an hour in.

The estimate is deliberately simple (and printed): weights, gradients and AdamW moments of the policy; the frozen
reference and the critic when used; the rollout KV cache for `rollout.batch_size` sequences of prompt +
`max_new_tokens`; training activations for one micro-batch (about 34 bytes per token per hidden unit per layer at
16-bit, the usual transformer figure, or two layers' worth with gradient checkpointing); and one chunk of logits.
It is a guard against the obvious, not a precise profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.models import resolve_model_path

ASSUMED_PROMPT_TOKENS = 256  # prompts are not rendered yet when the estimate is made


@dataclass
class MemoryTerm:
    name: str
    bytes: float
    knob: str


LOGITS_CHUNK = 4096  # models/logprobs.py's default chunk_size


def _param_count(model_dir: Path) -> int:
    cfg = json.loads((model_dir / "config.json").read_text())
    files = list(model_dir.glob("*.safetensors")) or list(model_dir.glob("*.bin"))
    stored = sum(f.stat().st_size for f in files)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32")
    width = 2 if ("16" in dtype) else 4
    return int(stored / width)


def available_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")  # unknown platform: do not guess


def estimate_memory(cfg: Any, device: torch.device, dtype: torch.dtype) -> list[MemoryTerm]:
    model_dir = resolve_model_path(cfg.model.path)
    arch = json.loads((model_dir / "config.json").read_text())
    params = _param_count(model_dir)
    width = torch.finfo(dtype).bits // 8
    hidden = int(arch.get("hidden_size", 0) or 0)
    layers = int(arch.get("num_hidden_layers", 0) or 0)
    heads = int(arch.get("num_attention_heads", 1) or 1)
    kv_heads = int(arch.get("num_key_value_heads", heads) or heads)
    head_dim = int(arch.get("head_dim", hidden // heads if heads else 0) or 0)
    vocab = int(arch.get("vocab_size", 0) or 0)
    seq = ASSUMED_PROMPT_TOKENS + cfg.rollout.max_new_tokens
    rows = min(cfg.rollout.batch_size, cfg.train.prompts_per_step * cfg.rollout.n)
    alg = cfg.algorithm
    terms = [
        MemoryTerm("policy weights", params * width, "model.path (a smaller model) or model.dtype=bfloat16"),
        MemoryTerm("gradients + AdamW moments", params * width * 3, "model.lora (train adapters only), a smaller "
                   "model.path or model.dtype") if cfg.model.lora is None else
        # LoRA: adapters are a small fraction of the weights; 5% is a generous bound for ranks up to ~64
        MemoryTerm("LoRA adapters (weights, grads, AdamW)", params * width * 4 * 0.05, "model.lora.r"),
        MemoryTerm("rollout KV cache", 2.0 * layers * kv_heads * head_dim * width * seq * rows,
                   "rollout.batch_size or rollout.max_new_tokens"),
    ]
    mb_tokens = min(cfg.train.micro_batch_size, rows) * seq
    layer_factor = 2 if cfg.model.gradient_checkpointing else layers
    terms.append(MemoryTerm("training activations", 34.0 * width / 2 * mb_tokens * hidden * layer_factor,
                            "train.micro_batch_size or model.gradient_checkpointing=true"))
    # the LM head runs on at most 4,096 response positions at a time (models/logprobs.py), and a micro-batch
    # has no more response positions than its rows x max_new_tokens
    chunk = min(LOGITS_CHUNK, min(cfg.train.micro_batch_size, rows) * cfg.rollout.max_new_tokens)
    terms.append(MemoryTerm("logits chunk", 3.0 * chunk * vocab * 4,
                            "train.micro_batch_size (the chunk is at most 4,096 response tokens)"))
    if alg.kl_coef > 0 or alg.reference_reset_every:
        terms.append(MemoryTerm("reference model", params * width, "algorithm.kl_coef=0 (no reference)"))
    if alg.critic is not None and alg.critic.kind == "separate":
        terms.append(MemoryTerm("critic (weights, grads, AdamW)", params * width * 4,
                                "algorithm.critic.kind=head"))
    return terms


def check_memory(cfg: Any, device: torch.device, dtype: torch.dtype, available: float | None = None) -> float:
    """Raise MemoryError naming the biggest term's knob when the estimate exceeds what is free; else return it."""
    terms = estimate_memory(cfg, device, dtype)
    total = sum(t.bytes for t in terms)
    free = available_bytes(device) if available is None else available
    if total > free:
        worst = max(terms, key=lambda t: t.bytes)
        lines = "\n".join(f"  {t.name:32s} {t.bytes / 2**30:8.2f} GiB" for t in sorted(terms, key=lambda t: -t.bytes))
        raise MemoryError(
            f"this config needs about {total / 2**30:.2f} GiB on {device.type} but {free / 2**30:.2f} GiB is free:\n"
            f"{lines}\nThe largest part is the {worst.name}: lower {worst.knob}. "
            "(Set train.memory_check=false to skip this estimate.)"
        )
    return total
