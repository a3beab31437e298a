r"""Process supervision: token-level advantages from step rewards (a score per reasoning step).

A step reward puts each step's score on the step's last response token (`step_rewards`, `step_mask`; see
`rlvr.rewards.process`). The estimator here turns them into per-token advantages.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages.common import ADVANTAGES, NonNegative, _grpo64, _out_dtype, group_stats


def normalized_step_returns(step_rewards: torch.Tensor, step_mask: torch.Tensor, group_ids: torch.Tensor,
                            mask: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    r"""DeepSeekMath's process-supervised advantage, [N, T] float64 (0 outside `mask`).

    The step rewards of all samples of a group, R = {r_i^(j)}, are normalized together,

        r~_i^(j) = (r_i^(j) - mean(R)) / (std(R) + eps)          (unbiased std; 0 for one step or all equal)

    and a token's advantage is the sum of the normalized rewards of its own step and every later step:

        A_{i,t} = \sum_{j : end(j) >= t} r~_i^(j)

    Tokens after the last scored step (e.g. the final answer line) get 0. A group without steps gets 0.
    """
    sm = step_mask > 0
    rows = group_ids[:, None].expand_as(sm)[sm]
    values = step_rewards[sm].to(torch.float64)
    x = torch.zeros(step_rewards.shape, dtype=torch.float64, device=step_rewards.device)
    if values.numel():
        mean, std, _ = group_stats(values, rows)
        x[sm] = (values - mean) / (std + eps)
    # reverse cumulative sum along the row: each position collects its step's reward and all later ones
    return x.flip(-1).cumsum(-1).flip(-1) * (mask > 0)


@ADVANTAGES.register("process_grpo")
def process_grpo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    mask: torch.Tensor,
    step_rewards: torch.Tensor,
    step_mask: torch.Tensor,
    *,
    outcome_coef: NonNegative = 1.0,
    process_coef: NonNegative = 1.0,
    eps: NonNegative = 1e-6,
) -> torch.Tensor:
    r"""GRPO with process supervision: the outcome advantage plus the step-reward advantage, per token.

        A_{i,t} = outcome_coef * (r_i - mean_group(r)) / (std_group(r) + eps)
                + process_coef * \sum_{j : end(j) >= t} (r_i^(j) - mean(R_group)) / (std(R_group) + eps)

    where r_i is the sample's combined (outcome) reward and R_group all step rewards of the group's samples
    (`normalized_step_returns`). `outcome_coef: 0` is the paper's pure process supervision; `process_coef: 0`
    is plain GRPO broadcast to tokens. Returns [N, T], zero outside the mask.

    Source: Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
    arXiv:2402.03300, section 4.1.3 (process supervision RL with GRPO); the sum with the outcome term follows
    the combination used by R1-VL-style step rewards (ours: a weighted sum).
    """
    m = mask > 0
    outcome = torch.where(m, _grpo64(rewards, group_ids, eps)[:, None], 0.0)
    process = normalized_step_returns(step_rewards, step_mask, group_ids, mask, eps)
    return (outcome_coef * outcome + process_coef * process).to(_out_dtype(rewards, mask))


process_grpo_advantages.needs_group = True  # type: ignore[attr-defined]
