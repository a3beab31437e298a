"""FSDP2 for the torchrun learner (`distributed.learner: fsdp2`): the decoder layers' parameters, gradients and
AdamW moments are sharded over the ranks with `torch.distributed.fsdp.fully_shard`.

What is sharded and what is not:
- every decoder layer (the model's `_no_split_modules` classes, e.g. `Qwen2DecoderLayer`) is its own FSDP unit,
  and the decoder (`model.get_decoder()`) is the root unit holding what is left of it (the final norm);
- the token embedding and the LM head stay whole on every rank (they are often tied, and the learner's chunked
  LM head reads the head's weight directly); their gradients are summed across ranks like the `ddp` learner's.
FSDP is told to *sum* gradients (divide factor 1), because rlvr's losses are already normalized by the global
token count: an fsdp2 update equals the single-process update on the union of the ranks' samples (tested).

Rollouts need whole weights and, unlike a sharded forward, do not run in lock step across ranks (each rank's
responses end at different times). So the trainer keeps an unsharded copy for the rollout engine, rewards,
evaluation and checkpoints, and `gather_into` refreshes it from the shards after every update. That copy costs
one model's weights per rank; the gradients and the optimizer's moments (3x the weights with AdamW) are what
sharding saves.

Every sharded forward or backward is a collective, so all ranks must run the same number of them: `pad_count`
gives the largest count over the ranks, and the learner runs zero-weight dummy micro-batches to make up the
difference.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from rlvr.parallel import data_parallel as dp


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without distributed tensors
        return None
    return DTensor


def is_sharded(t: torch.Tensor) -> bool:
    cls = _dtensor_type()
    return cls is not None and isinstance(t, cls)


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The repeated blocks to shard: modules whose class is named in the model's `_no_split_modules`."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"distributed.learner=fsdp2: cannot find the decoder layers of {type(model).__name__} "
                         "(it names no `_no_split_modules`); use distributed.learner=ddp")
    return layers


def shard_model(model: Any) -> Any:
    """Shard `model` in place for training (see the module docstring) and return it."""
    from torch.distributed.fsdp import fully_shard

    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    if decoder is None or decoder is model:
        raise ValueError(f"distributed.learner=fsdp2 needs a model with a separate decoder and LM head; "
                         f"{type(model).__name__} has none. Use distributed.learner=ddp")
    whole = set()
    for getter in ("get_input_embeddings", "get_output_embeddings"):
        module = getattr(model, getter)() if hasattr(model, getter) else None
        if module is not None:
            whole |= set(module.parameters())
    units = []
    for layer in decoder_layers(model):
        units.append(fully_shard(layer))
    units.append(fully_shard(decoder, ignored_params=whole or None))
    for unit in units:
        unit.set_gradient_divide_factor(1.0)  # sum: the losses are normalized by global token counts
        unit.set_force_sum_reduction_for_comms(True)  # plain SUM collectives (gloo has no PREMUL_SUM)
    return model


def grad_sq_norm(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """Sum of squared gradient entries, over all ranks' shards for sharded parameters and once for whole ones."""
    sharded = torch.zeros((), dtype=torch.float64)
    whole = torch.zeros((), dtype=torch.float64)
    for p in params:
        if p.grad is None:
            continue
        if is_sharded(p.grad):
            sharded += p.grad.to_local().detach().double().pow(2).sum().cpu()
        else:
            whole += p.grad.detach().double().pow(2).sum().cpu()
    if dp.world_size() > 1:
        dist.all_reduce(sharded)
    return sharded + whole


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """`torch.nn.utils.clip_grad_norm_` for a mix of sharded and whole parameters: the global norm, and every
    gradient scaled by min(1, max_norm / norm)."""
    norm = float(grad_sq_norm(params).sqrt())
    if math.isfinite(norm) and norm > max_norm:
        coef = max_norm / (norm + 1e-6)
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef)
    return norm


@torch.no_grad()
def gather_into(sharded: torch.nn.Module, whole: torch.nn.Module) -> None:
    """Copy the sharded training model's parameters into the unsharded copy (a collective: every rank calls it)."""
    target = dict(whole.named_parameters())
    for name, p in sharded.named_parameters():
        full = p.full_tensor() if is_sharded(p) else p
        target[name].copy_(full.detach())


def pad_count(count: int) -> int:
    """The largest `count` over the ranks (every rank must run as many sharded forwards/backwards)."""
    if dp.world_size() == 1:
        return count
    t = torch.tensor([count], dtype=torch.long)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's full (unsharded, parameter-name keyed) state on CPU; a collective. Rank 0 gets it all."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a state written by `optimizer_state` (every rank passes the full state read from the checkpoint)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, optim_state_dict=state,
                             options=StateDictOptions(full_state_dict=True))
