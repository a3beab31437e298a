r"""OREAL's token-level importance weights: a group baseline per sample, reweighted per token by a token-level
reward model trained from outcome labels only (`rlvr prm` with `loss.type: oreal`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field

from rlvr.algorithms.advantages.common import ADVANTAGES, NonNegative, _out_dtype
from rlvr.algorithms.advantages.group import group_normalized_advantages, rloo_advantages


def oreal_token_weights(
    token_rm_scores: torch.Tensor,
    correct: torch.Tensor,
    mask: torch.Tensor,
    *,
    threshold: float = 0.5,
    reweight: Literal["both", "negative"] = "both",
    normalize: bool = False,
) -> torch.Tensor:
    r"""Per-token weights from the token-level reward model's scores s_t = sigmoid(w(s_t)) in (0, 1).

        correct sample:    omega_t = max( (s_t - tau) / (1 - tau), 0 )       tau = threshold; 2 s_t - 1 at 0.5
        incorrect sample:  omega_t = max( (tau - s_t) / tau, 0 )                                1 - 2 s_t at 0.5

    A correct answer learns most from the tokens the model credits; a wrong one is pushed down most on the tokens
    the model blames. `reweight: negative` keeps omega_t = 1 on correct samples (only negatives reweighted).
    `normalize: true` rescales each reweighted row so that its weights average 1 over its response tokens (a row
    whose weights are all 0 stays 0): the row keeps the magnitude of its sequence-level advantage and the token
    RM only moves it between tokens. Zero outside `mask`.
    """
    s = token_rm_scores.to(torch.float64)
    m = mask.to(torch.float64)
    ok = correct.bool()[:, None]
    pos = ((s - threshold) / (1.0 - threshold)).clamp(min=0.0)
    neg = ((threshold - s) / threshold).clamp(min=0.0)
    if reweight == "negative":
        pos = torch.ones_like(s)
    w = torch.where(ok, pos, neg) * m
    if normalize:
        reweighted = ~ok.expand_as(s) if reweight == "negative" else torch.ones_like(s, dtype=torch.bool)
        n = m.sum(-1, keepdim=True).clamp(min=1.0)
        mean = w.sum(-1, keepdim=True) / n
        scaled = torch.where(mean > 0, w / mean.clamp(min=1e-12), torch.zeros_like(w))
        w = torch.where(reweighted, scaled, w)
    return w


@ADVANTAGES.register("oreal")
def oreal_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    correct: torch.Tensor,
    mask: torch.Tensor,
    token_rm_scores: torch.Tensor,
    *,
    baseline: Literal["rloo", "grpo"] = "rloo",
    negative_factor: NonNegative = 0.5,
    threshold: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.5,
    reweight: Literal["both", "negative"] = "both",
    normalize: bool = False,
) -> torch.Tensor:
    r"""OREAL: a group-relative advantage, reweighted per token by a token-level reward model.

        A_i      = r_i - mean_{j != i} r_j                      (baseline: rloo; grpo: (r_i - mean_g) / std_g)
        s_{i,t}  = sigmoid(w(s_{<=t}))                          the token RM's score of token t of sample i
        omega    = oreal_token_weights(s, correct)              max(2s - 1, 0) if correct, max(1 - 2s, 0) if not
        A_{i,t}  = A_i * omega_{i,t} * (1 if correct_i else eta)                             eta = negative_factor

    The token-level reward model is trained from outcome labels only: p(y) = sigmoid((1/T) sum_t w(s_t)) against
    the verifier's 0/1 (`rlvr prm` with `loss.type: oreal`); its per-token w(s_t) then says which tokens of a
    correct answer earned the outcome and which tokens of a wrong one lost it.

    Source: Lyu et al., "Exploring the Limit of Outcome Reward for Learning Mathematical Reasoning" (OREAL),
    arXiv:2502.06781, section 3 (token-level reward model, its importance weights on positive and negative
    samples). Settings checked against the authors' config (InternLM/OREAL
    oreal/configs/oreal_w_tokenrm_OREAL-7B-SFT_seqlen16k.py): `reward_shaping_type = "rloo"`,
    `threshold_rescale` with `correct_threshold = incorrect_threshold = 0.5`, `positive_loss_factor = 1.0`,
    `negative_loss_factor = 0.5`. The weight formulas are our reading of the paper; the authors' training code for
    the token-RM weights was not available to check. OREAL's extra behaviour-cloning (SFT) term on correct
    samples is not part of this estimator. Returns [N, T], zero outside the mask.
    """
    base = (rloo_advantages(rewards, group_ids) if baseline == "rloo"
            else group_normalized_advantages(rewards, group_ids)).to(torch.float64)
    omega = oreal_token_weights(token_rm_scores, correct, mask, threshold=threshold, reweight=reweight,
                                normalize=normalize)
    factor = torch.full(correct.shape, float(negative_factor), dtype=torch.float64, device=correct.device)
    factor = factor.masked_fill(correct.bool(), 1.0)
    return (base[:, None] * omega * factor[:, None]).to(_out_dtype(rewards, token_rm_scores))


oreal_advantages.needs_group = True  # type: ignore[attr-defined]
