"""Weights to the rollout workers by a collective broadcast (`distributed.weight_sync: broadcast`).

The controller (the weights' source, rank 0) and the rollout workers (ranks 1..W) open a process group of
their own, apart from any learner group: a `TCPStore` on the controller's node and a gloo backend (CPU tensors)
or, when the workers have GPUs and the controller has CUDA, an NCCL backend (GPU tensors). Each sync sends the
state dict as one flat buffer per dtype. The receivers learn the layout (names, shapes, dtypes) from the call
that asks them to receive, so the source's dtype may differ from theirs (`load_state_dict` casts).

The default, `object_store`, puts the state dict in Ray's object store once and every worker fetches it; the
broadcast avoids the object store's copies, which matters for large models on GPUs. Status: the gloo path is
tested on CPU (`tests/e2e/test_distributed.py`); the NCCL path is the same code with another backend and has not
run here (no GPU was lent).
"""

from __future__ import annotations

import datetime
from typing import Any

import torch
import torch.distributed as dist

Layout = list[tuple[str, list[tuple[str, list[int]]]]]  # per dtype: (dtype name, [(key, shape), ...])


def open_group(host: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float) -> Any:
    """A process group of `world_size` members that does not touch torch.distributed's default group.
    Returns (store, group); keep the store alive as long as the group."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size, rank == 0, timeout=timeout)
    if backend == "nccl":
        group = dist.ProcessGroupNCCL(store, rank, world_size)
    else:
        group = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    return store, group


def layout_of(state: dict[str, torch.Tensor]) -> Layout:
    """Names and shapes grouped by dtype, in name order: the order both sides flatten in."""
    by_dtype: dict[str, list[tuple[str, list[int]]]] = {}
    for key in sorted(state):
        by_dtype.setdefault(str(state[key].dtype).removeprefix("torch."), []).append((key, list(state[key].shape)))
    return sorted(by_dtype.items())


def send(group: Any, state: dict[str, torch.Tensor], device: torch.device) -> None:
    """Broadcast `state` from rank 0, one flat buffer per dtype."""
    for _, entries in layout_of(state):
        flat = torch.cat([state[key].detach().reshape(-1).to(device) for key, _ in entries])
        group.broadcast(flat, 0).wait()


def receive(group: Any, layout: Layout, device: torch.device) -> dict[str, torch.Tensor]:
    """The state dict rank 0 sends with `send`, rebuilt from its layout."""
    state: dict[str, torch.Tensor] = {}
    for dtype, entries in layout:
        sizes = [int(torch.Size(shape).numel()) for _, shape in entries]
        flat = torch.empty(sum(sizes), dtype=getattr(torch, dtype), device=device)
        group.broadcast(flat, 0).wait()
        for (key, shape), part in zip(entries, torch.split(flat, sizes)):
            state[key] = part.view(shape)
    return state
