"""A frozen model that scores sampled tokens: the log-prob model role (the KL reference now, a teacher next).

The learner asks one question of it, `token_logprobs(batch, temperature)`: log pi(y_t | y_<t, x) of every
response token of the batch, [N, T] aligned with `batch.mask`. `LocalLogProbModel` answers in this process;
`rlvr.distributed.ray_groups.RemoteReference` answers from a Ray actor that runs a `LocalLogProbModel`.
A teacher for GKD, when it is not in the learner's process, also answers
`token_distributions(batch, temperature, top_k, chunk)`: its full next-token log-probs at every response token
(or their top-k form with a tail bucket, `rlvr.algorithms.distill.teacher_top_k`).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algorithms.distill import teacher_top_k
from rlvr.models.logprobs import _head_parts, decoder_hidden, forward_tokens
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

    @torch.no_grad()
    def token_distributions(self, batch: Batch, temperature: float, top_k: int = 0,
                            chunk: int = 1024) -> dict[str, torch.Tensor]:
        """The next-token distribution before every response token of `batch`, in row-major order of
        `batch.mask[:, 1:] > 0` (position t - 1 predicts token t), as log-probs at `temperature`:
        {"logprobs": [M, V]} with top_k = 0 (exact), else `teacher_top_k`'s {"logprobs": [M, k], "ids": [M, k],
        "tail": [M]}. The LM head runs `chunk` tokens at a time. Tensors come back on the CPU."""
        parts = _head_parts(self.model)
        if parts is None:
            raise ValueError("the teacher's logits are not lm_head(decoder(x)) (logit soft-capping or scaling), so "
                             "its next-token distributions cannot be computed per response token here")
        decoder, head = parts
        device = next(self.model.parameters()).device
        mb = batch.to(device)
        select = mb.mask[:, 1:] > 0
        hidden = decoder_hidden(self.model, decoder, mb.input_ids, mb.attention_mask, mb.mm_inputs)[:, :-1][select]
        out: dict[str, list[torch.Tensor]] = {"logprobs": [], "ids": [], "tail": []}
        for start in range(0, hidden.shape[0], max(1, chunk)):
            logp = torch.log_softmax(head(hidden[start : start + chunk]).float() / temperature, dim=-1)
            if top_k:
                for key, part in zip(("logprobs", "ids", "tail"), teacher_top_k(logp, top_k)):
                    out[key].append(part.cpu())
            else:
                out["logprobs"].append(logp.cpu())
        if not out["logprobs"]:  # no response token: empty tensors of the right width
            vocab = head.weight.shape[0]
            width = min(top_k, vocab) if top_k else vocab
            out = {"logprobs": [torch.zeros(0, width)], "ids": [torch.zeros(0, width, dtype=torch.int32)],
                   "tail": [torch.zeros(0)]}
        return {k: torch.cat(v) for k, v in out.items() if v and (top_k or k == "logprobs")}

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
