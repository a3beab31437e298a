"""A data-parallel learner: `torchrun --nproc_per_node N -m rlvr train RECIPE` runs N ranks.

Every rank holds the policy. Each step, all ranks draw the same prompts and each keeps its share (every N-th
prompt), samples and rewards them, and computes advantages on its own groups (groups are whole on one rank).
Gradients are summed across ranks after each mini-batch's backward pass, with the loss normalized by the *global*
token (or sequence) count, so an update equals the single-process update on the union of the ranks' samples
(tested). Rank 0 writes checkpoints, metrics and evaluations; the others wait at a barrier.

Backend: NCCL on CUDA, gloo on CPU (the tests run two CPU ranks). Batch-level statistics inside an estimator
(e.g. `std_scope: batch`, REINFORCE++'s batch normalization) are taken per rank.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def init_from_env() -> bool:
    """Join the process group torchrun describes (WORLD_SIZE > 1); return whether there is more than one rank."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not dist.is_available():
        return False
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    return dist.get_world_size() > 1


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def sum_floats(*values: float) -> list[float]:
    """Element-wise sum of floats over ranks (a no-op with one rank)."""
    if world_size() == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def all_reduce_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum gradients over ranks in one flat buffer (parameters without a gradient contribute zeros)."""
    if world_size() == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1).to(torch.float32) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset : offset + n].view_as(g).to(g.dtype)
        offset += n


def mean_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric averaged over the ranks that report it (rank 0 logs the result)."""
    if world_size() == 1:
        return metrics
    gathered: list[dict[str, float]] = [{} for _ in range(world_size())]
    dist.all_gather_object(gathered, metrics)
    keys = sorted(set().union(*gathered))
    return {k: sum(float(g[k]) for g in gathered if k in g) / sum(1 for g in gathered if k in g) for k in keys}


def broadcast_object(obj: Any) -> Any:
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]
