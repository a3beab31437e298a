r"""RLVR as supervised learning: PACS trains a policy-derived score to predict the verifiable reward (BCE)."""

from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from rlvr.algorithms.losses.common import LOSSES


def _dense_group_index(group_ids: torch.Tensor) -> torch.Tensor:
    return torch.unique(group_ids, return_inverse=True)[1]


@LOSSES.register("pacs")
def pacs_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: Annotated[float, Field(gt=0.0)] = 1.0,
    baseline: Literal["rloo", "grpo", "none"] = "rloo",
    class_balance: bool = True,
    eps: Annotated[float, Field(gt=0.0)] = 1e-6,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""PACS: the verifiable reward is a label, and a policy-derived score is trained to predict it with BCE.

        r^_i   = beta * sum_t (log pi(y_it) - log pi_old(y_it))                          (masked tokens)
        psi_i  = r^_i - 1/(n_g - 1) * sum_{j in g, j != i} r^_j                     baseline = "rloo" (paper)
                 (r^_i - mean_g r^) / (std_g r^ + eps)                               baseline = "grpo"
                 r^_i                                                                 baseline = "none"
        L_i    = w_i * BCEWithLogits(psi_i, y_i),     y_i = clamp(reward_i, 0, 1)
        w_i    = n_g / (K_g * #{j in g : y_j = y_i})   (class balance within the group; K_g distinct labels)

    The gradient is w_i * (sigmoid(psi_i) - y_i) * grad psi_i: a policy gradient whose advantage-like weight
    is the critic's (sigmoid(psi)) prediction error, which is the paper's implicit actor-critic coupling.

    Source: Li et al., "Implicit Actor Critic Coupling via a Supervised Learning Framework for RLVR",
    arXiv:2509.02522. Verified against the authors' code, github.com/ritzz-ai/PACS
    src/pacs/pacs_core_algos.py (`compute_reward` method 1, `compute_rloo_outcome_advantage`,
    `compute_weight` mode "question" = sklearn's "balanced" class weights, `BCEWithLogitsLoss`), and their
    scripts (RLOO, beta = 1, class weights on).

    Aggregation: this is a sequence-level loss; L_i is broadcast to the row's tokens, so use
    `seq_mean_token_mean` (= mean_i L_i, the reference's BCE mean). It needs a batch statistic: the group
    baseline and class weights are computed over the rows given, so a micro-batch must hold whole groups
    (all samples of each prompt), as the reference code asserts.

    This implementation: the score is relative to pi_old (the released code's choice; the inputs name
    `old_logprobs`). Rows with no trained token are left out of the group statistics. A group of one has
    baseline 0 under "rloo" and psi = 0 under "grpo". Rewards outside [0, 1] are clamped to be labels.
    Caution with "grpo": on policy (log pi = log pi_old) every r^ is 0, the group std is 0, and the gradient
    of psi is ~1/eps; the paper's default "rloo" has no such scale.

    Diagnostics: `score` (psi_i), `predicted` (sigmoid(psi_i)), `weight` (w_i), all broadcast to tokens.
    """
    valid = mask > 0
    row_valid = valid.any(dim=1)
    row_w = row_valid.to(logprobs.dtype)
    token_log_ratio = torch.where(valid, logprobs - old_logprobs, torch.zeros_like(logprobs))
    implicit_reward = beta * token_log_ratio.sum(dim=1)                                       # r^_i

    group = _dense_group_index(group_ids.to(logprobs.device))
    n_groups = int(group.max()) + 1 if group.numel() else 0
    zeros = torch.zeros(n_groups, dtype=logprobs.dtype, device=logprobs.device)
    count = zeros.index_add(0, group, row_w)[group]                                          # n_g
    total = zeros.index_add(0, group, implicit_reward * row_w)[group]
    if baseline == "rloo":
        others = (count - row_w).clamp(min=1.0)  # a group of one: the leave-one-out sum is 0, so baseline 0
        score = implicit_reward - (total - implicit_reward * row_w) / others
    elif baseline == "grpo":
        mean = total / count.clamp(min=1.0)
        sq_dev = zeros.index_add(0, group, (implicit_reward - mean) ** 2 * row_w)[group]
        std = torch.sqrt(sq_dev / (count - 1.0).clamp(min=1.0) + 1e-20)  # unbiased; floor: finite grad
        score = (implicit_reward - mean) / (std + eps)
    elif baseline == "none":
        score = implicit_reward
    else:
        raise ValueError(f"unknown PACS baseline '{baseline}'; expected rloo, grpo or none")

    labels = rewards.to(logprobs.dtype).clamp(0.0, 1.0)
    if class_balance:
        same_group = (group[:, None] == group[None, :]) & row_valid[None, :]
        same_label = same_group & (labels[:, None] == labels[None, :])
        label_count = same_label.sum(dim=1).to(logprobs.dtype).clamp(min=1.0)
        distinct = (same_group.to(logprobs.dtype) / label_count[None, :]).sum(dim=1).clamp(min=1.0)  # K_g
        weight = count / (distinct * label_count)
    else:
        weight = torch.ones_like(labels)
    per_seq = weight * F.binary_cross_entropy_with_logits(score, labels, reduction="none")
    loss = per_seq[:, None].expand_as(logprobs)
    diag = {"score": score.detach()[:, None].expand_as(logprobs),
            "predicted": torch.sigmoid(score.detach())[:, None].expand_as(logprobs),
            "weight": weight[:, None].expand_as(logprobs)}
    return loss, diag
