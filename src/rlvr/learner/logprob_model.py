"""A frozen model that scores sampled tokens: the log-prob model role (the KL reference now, a teacher next).

The learner asks one question of it, `token_logprobs(batch, temperature)`: log pi(y_t | y_<t, x) of every
response token of the batch, [N, T] aligned with `batch.mask`. `LocalLogProbModel` answers in this process;
`rlvr.distributed.ray_groups.RemoteReference` answers from a Ray actor that runs a `LocalLogProbModel`.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.models.logprobs import forward_tokens
from rlvr.types import Batch


class LocalLogProbModel:
    """A frozen causal LM in this process, run without gradients micro-batch by micro-batch."""

    def __init__(self, model: torch.nn.Module, micro_batch_size: int, pack_tokens: bool = False):
        self.model = model
        self.micro_batch_size = micro_batch_size
        self.pack_tokens = pack_tokens

    @torch.no_grad()
    def token_logprobs(self, batch: Batch, temperature: float) -> torch.Tensor:
        device = next(self.model.parameters()).device
        out = torch.zeros(batch.mask.shape, dtype=torch.float32, device=device)
        for rows in torch.split(torch.arange(len(batch)), self.micro_batch_size):
            mb = batch.select(rows).to(device)
            lp = forward_tokens(self.model, mb.input_ids, mb.attention_mask, mb.mask, temperature,
                                pack_tokens=self.pack_tokens, mm_inputs=mb.mm_inputs).logprobs
            out[rows.to(device), : lp.shape[1]] = lp
        return out

    def state_dict(self) -> dict[str, Any]:
        return self.model.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state)

    def close(self) -> None:
        pass


def as_logprob_model(reference: Any, micro_batch_size: int, pack_tokens: bool = False) -> Any:
    """A log-prob model from what the caller has: a bare torch module is wrapped, a log-prob model passes."""
    if isinstance(reference, torch.nn.Module):
        return LocalLogProbModel(reference, micro_batch_size, pack_tokens)
    return reference
