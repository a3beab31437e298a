"""Helpers for tests that start several torch.distributed ranks (not a test module)."""

from __future__ import annotations

import socket
from collections.abc import Callable

import torch

from rlvr.types import Group, Sample, TaskRecord


def free_port() -> int:
    """A TCP port that is free now on 127.0.0.1 (for MASTER_PORT / torchrun --master_port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def random_groups(num_groups: int, seed: int, length: Callable[[int, int], int]) -> list[Group]:
    """`num_groups` groups of two samples with random response tokens; sample i of group g has
    `length(g, i)` tokens, reward (g + i) % 2 and behaviour log-probs of -1."""
    gen = torch.Generator().manual_seed(seed)
    groups = []
    for g in range(num_groups):
        samples = []
        for i in range(2):
            resp = torch.randint(2, 60, (length(g, i),), generator=gen).tolist()
            samples.append(Sample(prompt_ids=[5, 6, 7], response_ids=resp, reward=float((g + i) % 2),
                                  correct=bool((g + i) % 2), logprobs=[-1.0] * len(resp)))
        groups.append(Group(TaskRecord(id=str(g), question=""), [5, 6, 7], samples))
    return groups
