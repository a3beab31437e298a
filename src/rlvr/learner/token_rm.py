"""A frozen token-level reward model that scores the batch's tokens (OREAL's token RM, `token_rm_scores`).

`token_scores(batch)` is sigmoid(w(s_<=t)) for every token t of every row, [N, T] aligned with `batch.mask` and
zero outside it: a one-label `AutoModelForTokenClassification` reads each row's own tokens (its attention-mask
positions, re-packed from position 0 as `rlvr prm` trained it), and its logit at a token is that token's score.
"""

from __future__ import annotations

import torch

from rlvr.models.reward_head import token_logits
from rlvr.types import Batch


class TokenRewardModel:
    def __init__(self, model: torch.nn.Module, pad_token_id: int, micro_batch_size: int):
        self.model = model.eval()
        self.pad_token_id = pad_token_id
        self.micro_batch_size = micro_batch_size

    @torch.no_grad()
    def token_scores(self, batch: Batch) -> torch.Tensor:
        device = next(self.model.parameters()).device
        out = torch.zeros(batch.mask.shape, dtype=torch.float32)
        ids, attention = batch.input_ids.cpu(), batch.attention_mask.cpu()
        for rows in torch.split(torch.arange(len(batch)), self.micro_batch_size):
            where = [torch.nonzero(attention[i]).squeeze(-1) for i in rows.tolist()]
            logits = token_logits(self.model, [ids[i, w].tolist() for i, w in zip(rows.tolist(), where)],
                                  self.pad_token_id, device)
            for i, w, row in zip(rows.tolist(), where, logits):
                out[i, w] = torch.sigmoid(row).cpu()
        return out * batch.mask.cpu().float()

    def close(self) -> None:
        """Nothing to release: the model lives in the learner's process and goes with it."""

