r"""Reweighted GRPO: the group-normalized advantage rescaled per sample by a difficulty, confidence or
entropy weight: GRPO-LEAD (the group's accuracy), ACE (the policy's confidence shift on errors) and ETTRL's
EAR (response entropy).
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field

from rlvr.algorithms.advantages.common import (
    ADVANTAGES,
    NonNegative,
    _group_sums,
    _grpo64,
    _out_dtype,
    group_stats,
)


def _masked_row_mean(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of x over each row's masked tokens (0 for an empty row) and the token counts, float64."""
    m = mask.to(torch.float64)
    counts = m.sum(-1)
    return (x.to(torch.float64) * m).sum(-1) / counts.clamp(min=1), counts


@ADVANTAGES.register("grpo_lead")
def grpo_lead_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    correct: torch.Tensor,
    *,
    weight_min: NonNegative = 0.4,
    weight_max: NonNegative = 1.5,
    midpoint: Annotated[float, Field(ge=0, le=1)] = 0.75,
    steepness: NonNegative = 10.0,
    eps: NonNegative = 1e-6,
) -> torch.Tensor:
    r"""GRPO-LEAD's difficulty-aware advantage reweighting.

        rho_q    = fraction of the group's samples that are correct            (empirical accuracy)
        w(rho)   = A + (B - A) / (1 + exp(k (rho - rho_0)))                    (logistic, decreasing in rho)
        Ã_i      = (r_i - mean_group) / (std_group + eps)                      (GRPO)
        A'_i     = Ã_i * w(rho_q)        if Ã_i > 0                            (hard problem -> larger reward)
                   Ã_i * w(1 - rho_q)    if Ã_i <= 0                           (easy problem -> larger penalty)

    with A = weight_min = 0.4, B = weight_max = 1.5, rho_0 = midpoint = 0.75, k = steepness = 10, the
    authors' defaults. All-equal groups and groups of one get 0. (The length-dependent reward and the explicit
    penalty for wrong answers are rewards, not part of this estimator.)

    Source: Zhang & Zuo, "GRPO-LEAD: A Difficulty-Aware Reinforcement Learning Approach for Concise Mathematical
    Reasoning in Language Models", arXiv:2504.09696; aeroplanepaper/GRPO-LEAD
    verl/verl/trainer/ppo/core_algos.py (logistic_reweight, compute_grpo_outcome_advantage).
    """
    base = _grpo64(rewards, group_ids, eps)
    _, _, counts = group_stats(rewards, group_ids)
    accuracy = _group_sums(correct.bool().to(torch.float64), group_ids) / counts.clamp(min=1)

    def weight(x: torch.Tensor) -> torch.Tensor:
        return weight_min + (weight_max - weight_min) * torch.sigmoid(-steepness * (x - midpoint))

    adv = torch.where(base > 0, base * weight(accuracy), base * weight(1.0 - accuracy))
    return adv.to(_out_dtype(rewards))


grpo_lead_advantages.needs_group = True  # type: ignore[attr-defined]


@ADVANTAGES.register("ace")
def ace_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    correct: torch.Tensor,
    mask: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    *,
    alpha: NonNegative = 1.0,
    confidence: Literal["sum", "mean"] = "sum",
    eps: NonNegative = 1e-6,
) -> torch.Tensor:
    r"""Asymmetric Confidence-aware Error Penalty: overconfident errors get a larger negative advantage.

        c_i = log pi(y_i|x) - log pi_ref(y_i|x) = \sum_t (old_logprobs - ref_logprobs)   (confidence shift)
        A_i = (r_i - mean_group) / (std_group + eps)                                        (GRPO)
        A_i <- A_i * (1 + alpha * softplus(c_i))    if y_i is incorrect and A_i < 0;  A_i otherwise

    Correct samples and positive advantages are untouched (asymmetric); an error the policy has grown more
    confident in than the reference (c_i >> 0) is pushed down harder, one it is less confident in
    (c_i << 0) keeps about its GRPO advantage. pi is the sampling policy (`old_logprobs`).
    This implementation: the paper's exact equation could not be retrieved here, only its definition of c_i
    and that ACE scales negative advantages by a softplus of c_i; the multiplicative (1 + alpha softplus(c))
    form and alpha = 1 are this library's choice. `confidence="mean"` divides c_i by the response length
    (a length-normalized variant; not in the paper).

    Source: Xu et al., "Overconfident Errors Need Stronger Correction: Asymmetric Confidence Penalties for
    Reinforcement Learning", arXiv:2602.21420 (defines ACE, the Asymmetric Confidence-aware Error Penalty).
    """
    m = (mask > 0).to(torch.float64)
    shift = ((old_logprobs.to(torch.float64) - ref_logprobs.to(torch.float64)) * m).sum(-1)
    if confidence == "mean":
        shift = shift / m.sum(-1).clamp(min=1)
    base = _grpo64(rewards, group_ids, eps)
    penalize = ~correct.bool() & (base < 0)
    adv = torch.where(penalize, base * (1.0 + alpha * torch.nn.functional.softplus(shift)), base)
    return adv.to(_out_dtype(rewards))


ace_advantages.needs_group = True  # type: ignore[attr-defined]


@ADVANTAGES.register("ear")
def entropy_reshaped_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: Literal["reshape", "clip"] = "reshape",
    clip: Annotated[float, Field(gt=0)] = 2.0,
    eps: NonNegative = 1e-6,
) -> torch.Tensor:
    r"""ETTRL's Entropy-based Advantage Reshaping (EAR) of GRPO advantages.

        H_i = mean_t entropy_{i,t}                             (response-level entropy of the sampling policy)
        Y_i = 1 + (mean_{j in group(i)} H_j - H_i) / mean_{j in group(i)} H_j
        A_i = Y_i * (r_i - mean_group) / (std_group + eps)     (mode="reshape", Adv-Res, the main method)
        A_i = clip(GRPO_i, -beta, beta)                        (mode="clip", Adv-Clip, beta = `clip`)

    A confident (low-entropy) response gets Y > 1, an uncertain one Y < 1: this damps the large early advantages
    that a few samples matching a noisy majority-vote pseudo-label would otherwise get. This implementation
    clamps Y at 0 so a very high-entropy response never flips the sign of its advantage, uses Y = 1 when the
    group's mean entropy is 0 or the response has no trained tokens, and averages H over the group's responses
    that have trained tokens.

    Source: Liu et al., "ETTRL: Balancing Exploration and Exploitation in LLM Test-Time Reinforcement Learning
    Via Entropy Mechanism", arXiv:2508.11356 (EAR: Adv-Res and Adv-Clip).
    """
    base = _grpo64(rewards, group_ids, eps)
    if mode == "clip":
        return base.clamp(-clip, clip).to(_out_dtype(rewards))
    h, counts = _masked_row_mean(entropy, mask)
    has_tokens = (counts > 0).to(torch.float64)
    group_h = _group_sums(h * has_tokens, group_ids) / _group_sums(has_tokens, group_ids).clamp(min=1)
    y = 1.0 + (group_h - h) / group_h.clamp(min=1e-12)
    y = torch.where((group_h > 0) & (counts > 0), y.clamp(min=0.0), torch.ones_like(y))
    return (y * base).to(_out_dtype(rewards))


entropy_reshaped_advantages.needs_group = True  # type: ignore[attr-defined]
