"""AdamW and the learning-rate schedule (linear warm-up, then constant, cosine or linear decay)."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from rlvr.config import OptimConfig

log = logging.getLogger("rlvr.optim")


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig,
                    extra_groups: list[dict[str, Any]] | None = None) -> torch.optim.Optimizer:
    """AdamW over the model's trainable parameters, plus optional extra parameter groups (own lr)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    from rlvr.parallel.fsdp import is_sharded

    # FSDP2 shards some parameters (DTensors) and leaves others whole; one fused/foreach kernel call cannot mix
    # the two kinds, and AdamW calls its kernel once per parameter group, so each kind gets its own group.
    sharded = [p for p in params if is_sharded(p)]
    whole = [p for p in params if not is_sharded(p)]
    groups = [{"params": ps} for ps in (sharded, whole) if ps] + list(extra_groups or [])
    kwargs = dict(lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)
    if cfg.fused and _fused_ok(groups):
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except (RuntimeError, TypeError, ValueError) as err:  # this torch or device has no fused kernel
            log.info("fused AdamW is not available here (%s); using the standard kernel", err)
    return torch.optim.AdamW(groups, **kwargs)


def _fused_ok(groups: list[dict[str, Any]]) -> bool:
    """Fused AdamW needs floating-point parameters on CPU or CUDA."""
    params = [p for g in groups for p in g["params"]]
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


def lr_factor(step: int, total: int, cfg: OptimConfig) -> float:
    """Multiplier of cfg.lr at optimizer step `step` (0-based) out of `total`."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, total - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if cfg.schedule == "cosine" else 1.0 - progress
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int) -> Any:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total_steps, cfg))
