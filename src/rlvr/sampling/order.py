"""The seeded, resumable order in which a split's prompts are visited: a permutation per epoch."""

from __future__ import annotations

from typing import Any

import torch


class PromptSampler:
    """Deterministic prompt order: epoch e is a permutation seeded by (seed, e). Its position is resumable."""

    def __init__(self, size: int, seed: int = 0, shuffle: bool = True):
        if size < 1:
            raise ValueError("the training split is empty")
        self.size = size
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self._order: list[int] | None = None

    def _epoch_order(self) -> list[int]:
        if self._order is None:
            if self.shuffle:
                g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
                self._order = torch.randperm(self.size, generator=g).tolist()
            else:
                self._order = list(range(self.size))
        return self._order

    def next(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            order = self._epoch_order()
            take = min(k - len(out), self.size - self.position)
            out.extend(order[self.position : self.position + take])
            self.position += take
            if self.position == self.size:
                self.epoch, self.position, self._order = self.epoch + 1, 0, None
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "size": self.size, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("size") != self.size:
            raise ValueError(f"the checkpoint's sampler covered {state.get('size')} prompts but the task now has "
                             f"{self.size}; resume with the same task config")
        self.epoch, self.position, self._order = int(state["epoch"]), int(state["position"]), None
