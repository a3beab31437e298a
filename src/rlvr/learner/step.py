"""One RL update on a step's groups, and the policy learner as a trainable role in this process.

The trainable role's protocol (`rlvr.roles.Trainable`) is: `learn(groups) -> metrics`, `pull_weights(model)`,
`state_dict()`, `load_state_dict(state)`, `reset_reference()`, `close()`. `LocalTrainable` is it here (one
process, a torchrun rank, or FSDP2 shards); `rlvr.distributed.ray_learner.RayLearnerGroup` is it on Ray actors,
whose ranks each call `learn_on` below.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.learner.learner import Learner
from rlvr.types import Batch, Group


def learn_on(learner: Learner, groups: list[Group], pad_id: int) -> dict[str, float]:
    """The learner's part of a step: pad the groups into a batch, compute what the algorithm asks for (old/ref
    log-probs, values), the advantages (written back to each sample for logs) and the update."""
    batch = Batch.from_groups(groups, pad_id=pad_id)
    batch, inputs = learner.prepare(batch)
    advantages = learner.compute_advantages(batch, inputs)
    record_advantages(groups, advantages, batch)
    stats = learner.update(batch)
    # Work done by frozen models this step (the lab's equal-work check): the sequence tokens they scored.
    sequence_tokens = float(batch.attention_mask.sum())
    if batch.teacher_logprobs is not None or getattr(learner, "full_logits", False):
        stats["teacher_forward_tokens"] = sequence_tokens
    if batch.ref_logprobs is not None:
        stats["reference_forward_tokens"] = sequence_tokens
    return stats


def record_advantages(groups: list[Group], advantages: torch.Tensor, batch: Batch) -> None:
    """Write each sample's advantage back (a float, or one value per response token) for logs and reports."""
    flat = [s for g in groups for s in g.samples]
    if advantages.dim() == 1:
        for sample, adv in zip(flat, advantages.tolist()):
            sample.advantage = adv
        return
    per_token = batch.advantages.detach().cpu()
    for row, sample in enumerate(flat):
        start = int(batch.prompt_lengths[row])
        sample.advantage = per_token[row, start : start + len(sample.response_ids)].tolist()


class LocalTrainable:
    """The policy learner in this process. With FSDP2 it trains a sharded copy, and `pull_weights` gathers the
    shards into the controller's whole policy; otherwise the learner trains that very policy."""

    def __init__(self, learner: Learner, pad_id: int):
        self.learner = learner
        self.pad_id = pad_id

    def learn(self, groups: list[Group]) -> dict[str, float]:
        return learn_on(self.learner, groups, self.pad_id)

    def pull_weights(self, model: torch.nn.Module) -> None:
        if self.learner.model is not model:  # a sharded copy (distributed.learner=fsdp2)
            from rlvr.parallel.fsdp import gather_into

            gather_into(self.learner.model, model)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)

    def reset_reference(self) -> None:
        self.learner.reset_reference()

    def close(self) -> None:
        """Nothing to release: the reference it uses is a role of its own, closed by its placement."""
