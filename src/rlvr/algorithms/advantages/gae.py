r"""Critic-based estimation: Generalized Advantage Estimation over response tokens, and the critic's
targets (`gae_returns`)."""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages.common import (
    ADVANTAGES,
    Discount,
    _masked_whiten,
    _out_dtype,
    _reverse_discounted_sum,
)


def _next_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """values at the next masked position after t in the same row (0 after the row's last masked token)."""
    n, t_len = values.shape
    m = mask > 0
    positions = torch.arange(t_len, device=mask.device).expand(n, t_len)
    idx = torch.where(m, positions, torch.full_like(positions, t_len))  # t_len = "no further token"
    suffix_min = idx.flip(-1).cummin(-1).values.flip(-1)  # first masked index >= t
    nxt = torch.cat([suffix_min[:, 1:], torch.full((n, 1), t_len, device=mask.device)], dim=1)  # first masked index > t
    padded = torch.cat([values.to(torch.float64), torch.zeros(n, 1, dtype=torch.float64, device=values.device)], dim=1)
    return padded.gather(1, nxt)


@ADVANTAGES.register("gae")
def gae_advantages(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: Discount = 1.0,
    lam: Discount = 1.0,
    whiten: bool = False,
) -> torch.Tensor:
    r"""Generalized Advantage Estimation over each row's response tokens.

        delta_t = r_t + gamma * V_{t+1} - V_t          (V after the last response token is 0)
        A_t     = \sum_{k >= 0} (gamma * lam)^k delta_{t+k}

    where t+1 is the row's next masked token (responses may start at any offset; unmasked positions are skipped
    and neither their rewards nor their values are read). With lam = gamma = 1 (Open-Reasoner-Zero's setting)
    A_t = (reward-to-go) - V_t; with lam = 0, A_t = delta_t. `whiten=True` normalizes the advantages to mean 0,
    std 1 over the masked tokens of the batch (as in PPO implementations). Returns [N, T], zero outside the mask.
    The critic's targets are `gae_returns(advantages, values, mask)` computed on the un-whitened advantages.

    Source: Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage Estimation",
    arXiv:1506.02438; lam = gamma = 1 from Hu et al., "Open-Reasoner-Zero: An Open Source Approach to
    Scaling Up Reinforcement Learning on the Base Model", arXiv:2503.24290. Checked against OpenRLHF's
    get_advantages_and_returns and verl's compute_gae_advantage_return.
    """
    m = mask > 0
    v = torch.where(m, values.to(torch.float64), 0.0)
    r = torch.where(m, token_rewards.to(torch.float64), 0.0)
    deltas = r + gamma * _next_masked(v, m) - v
    adv = _reverse_discounted_sum(deltas, m, gamma * lam)
    if whiten:
        adv = _masked_whiten(adv, m)
    return adv.to(_out_dtype(token_rewards, values, mask))


def gae_returns(advantages: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Value targets for the critic: R_t = A_t + V_t on masked tokens (0 elsewhere).

    Use the un-whitened GAE advantages. With lam = 1 this is the discounted reward-to-go.

    Source: Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage Estimation",
    arXiv:1506.02438 (the TD(lambda) value target V_target = A^GAE + V).
    """
    out = torch.where(mask > 0, advantages.to(torch.float64) + values.to(torch.float64), 0.0)
    return out.to(_out_dtype(advantages, values))
