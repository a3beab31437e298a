r"""REINFORCE-family estimators: returns without a learned critic.

REINFORCE++ (per-token return, whitened over the global batch) and its group-baseline variant, and the
positive / negative sample reinforcement decomposition (PSR, NSR, Weighted-REINFORCE) on the verifier's
`correct` flag.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field

from rlvr.algorithms.advantages.common import (
    ADVANTAGES,
    Discount,
    NonNegative,
    _masked_whiten,
    _out_dtype,
    _reverse_discounted_sum,
    group_stats,
    sigma_filter,
)

SigmaLimit = Annotated[float, Field(gt=0)]


def _last_masked_onehot(mask: torch.Tensor) -> torch.Tensor:
    """[N, T] float64 with a 1 on each row's last masked position (all zeros for a fully masked row)."""
    m = mask > 0
    t_len = m.shape[1]
    last = torch.where(m, torch.arange(t_len, device=m.device).expand_as(m), torch.full_like(m, -1, dtype=torch.long)).max(-1).values
    onehot = torch.zeros(m.shape, dtype=torch.float64, device=m.device)
    rows = torch.nonzero(last >= 0).squeeze(-1)
    onehot[rows, last[rows]] = 1.0
    return onehot


@ADVANTAGES.register("reinforce_pp")
def reinforce_pp_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: Discount = 1.0,
    filter_sigma: SigmaLimit | None = None,
) -> torch.Tensor:
    r"""REINFORCE++: per-token return, normalized over all response tokens of the global batch.

        G_t = \sum_{s >= t} gamma^{s-t} r_s          (r_s = token_rewards: outcome reward on the last token,
                                                       minus the per-token KL penalty if KL is in the reward)
        A_t = (G_t - mean_batch(G)) / std_batch(G)

    mean and (population) std run over every masked token of the batch. Returns [N, T], zero outside the mask;
    an all-equal batch gives 0. This implementation steps only over masked tokens (a tool-observation gap is
    skipped, not discounted) and ignores token_rewards outside the mask.

    `filter_sigma: k` is StableReinforce's advantage filter (R1-Reward, arXiv:2505.02835, k = 3 there):
    after whitening, tokens with |A_t| > k are set to 0 (mean and std are not recomputed; see `sigma_filter`).
    None (the default) leaves the advantages untouched.

    Source: Hu et al., "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models",
    arXiv:2501.03262 (v1 title; later versions: "REINFORCE++: Stabilizing Critic-Free Policy Optimization with
    Global Advantage Normalization"); checked against OpenRLHF's `reinforce` estimator
    (openrlhf/trainer/ppo_utils/experience_maker.py: get_cumulative_returns + global advantage whitening).
    """
    returns = _reverse_discounted_sum(token_rewards, mask, gamma)
    return sigma_filter(_masked_whiten(returns, mask), filter_sigma).to(_out_dtype(token_rewards, mask))


@ADVANTAGES.register("reinforce_pp_baseline")
def reinforce_pp_baseline_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    filter_sigma: SigmaLimit | None = None,
) -> torch.Tensor:
    r"""REINFORCE++-baseline: subtract the prompt's mean outcome reward, then normalize over the global batch.

        r'_t = token_rewards_t - [t = last response token] * mean_{j in group(i)} r_j
        G_t  = \sum_{s >= t} r'_s                      (gamma = 1)
        A_t  = (G_t - mean_batch(G)) / std_batch(G)

    i.e. the group-mean baseline is taken on the outcome reward only (the per-token KL in token_rewards is kept),
    and mean/std run over all masked tokens of the batch. Returns [N, T], zero outside the mask; an all-equal
    group with no KL gives 0. This implementation follows OpenRLHF's `reinforce_baseline` (the paper authors'
    code), which re-centers with the batch mean as well as dividing by the batch std; ms-swift's variant only
    divides by the std of the centered rewards. gamma is fixed to 1 as in OpenRLHF. `filter_sigma` is
    StableReinforce's advantage filter, as in `reinforce_pp`.

    Source: Hu et al., "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models",
    arXiv:2501.03262 (later versions, "REINFORCE++ w/ baseline"); OpenRLHF/OpenRLHF
    openrlhf/trainer/ppo_utils/experience_maker.py (compute_advantages_and_returns, `reinforce_baseline`).
    """
    mean, _, _ = group_stats(rewards, group_ids)
    shifted = token_rewards.to(torch.float64) - mean[:, None] * _last_masked_onehot(mask)
    returns = _reverse_discounted_sum(shifted, mask, 1.0)
    return sigma_filter(_masked_whiten(returns, mask), filter_sigma).to(_out_dtype(token_rewards, rewards, mask))


reinforce_pp_baseline_advantages.needs_group = True  # type: ignore[attr-defined]


@ADVANTAGES.register("psr")
def psr_advantages(correct: torch.Tensor) -> torch.Tensor:
    r"""Positive Sample Reinforcement: train only on correct samples.

        A_i = 1 if y_i is correct, else 0

    (REINFORCE with reward in {0, 1} and no baseline.) This implementation reads the verifier's `correct`.

    Source: Zhu et al., "The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning",
    arXiv:2506.01347 (PSR); TianHongZXY/RLVR-Decomposed verl/trainer/ppo/core_algos.py
    (compute_psr_nsr_outcome_advantage, advantage="positive").
    """
    return correct.bool().to(torch.float32)


@ADVANTAGES.register("nsr")
def nsr_advantages(correct: torch.Tensor) -> torch.Tensor:
    r"""Negative Sample Reinforcement: train only on incorrect samples, pushing their likelihood down.

        A_i = -1 if y_i is incorrect, else 0

    This implementation reads the verifier's `correct`.

    Source: Zhu et al., "The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning",
    arXiv:2506.01347 (NSR); TianHongZXY/RLVR-Decomposed (advantage="negative").
    """
    return -(~correct.bool()).to(torch.float32)


@ADVANTAGES.register("w_reinforce")
def weighted_reinforce_advantages(
    correct: torch.Tensor,
    *,
    positive_weight: NonNegative = 0.1,
) -> torch.Tensor:
    r"""Weighted-REINFORCE: NSR plus a down-weighted PSR term.

        A_i = lambda if y_i is correct, -1 if incorrect          (lambda = positive_weight, 0.1 in the paper)

    i.e. the objective lambda * L_PSR + L_NSR. This implementation reads the verifier's `correct`.

    Source: Zhu et al., "The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning",
    arXiv:2506.01347 (W-REINFORCE); TianHongZXY/RLVR-Decomposed (advantage="weighted",
    positive_advantage_weight=0.1).
    """
    ok = correct.bool()
    return torch.where(ok, float(positive_weight), -1.0).to(torch.float32)
