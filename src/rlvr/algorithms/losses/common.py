r"""The policy-loss registry and the pieces the loss families share: the bounded log-ratio and PPO's clipped
surrogate (with dual-clip).

Family modules import from here, never from the package `__init__`, so there is no import cycle.
Notation: r_t = pi(a_t) / pi_old(a_t) is the token's importance ratio and A_t its advantage.
"""

from __future__ import annotations

import torch

from rlvr.registry import Registry

LOSSES: Registry = Registry("policy loss")



def zero_grad_at_zero_advantage(loss_fn):
    """Mark a loss whose per-token value and gradient are exactly zero on every token of a row whose
    advantages are all zero, whatever the other rows hold: the learner may then skip such rows' forward and
    backward (`train.skip_zero_advantage`). Only losses of the form f(r_t, sg[...]) * A_t per row qualify; a
    loss with a term that does not vanish at A = 0 (a drift or KL term, an SFT term, batch statistics such as
    a covariance over all tokens) must not carry the mark."""
    loss_fn.zero_grad_at_zero_advantage = True
    return loss_fn


_LOG_RATIO_BOUND = 20.0  # exp(20) ~ 4.9e8: finite in float32/bf16, and far outside any clip range


def _log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """log r_t = log pi(a_t) - log pi_old(a_t), clamped to [-20, 20] so that exp cannot overflow."""
    return (logprobs - old_logprobs).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)


def _clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    low: float | torch.Tensor,
    high: float | torch.Tensor,
    dual_clip: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""PPO's clipped surrogate per token, and the mask of tokens whose gradient a clip removed.

        L_t = -min(r_t A_t, clip(r_t, low, high) A_t)
        dual-clip (A_t < 0 only):  L_t = min(L_t, -c A_t)                                   c = dual_clip

    Source: Schulman et al., "Proximal Policy Optimization Algorithms", arXiv:1707.06347 (clipped surrogate);
    Ye et al., "Mastering Complex Control in MOBA Games with Deep Reinforcement Learning", arXiv:1912.09729
    (dual-clip). `low` and `high` may be tensors (per-token bounds, as in DCPO).
    """
    unclipped = ratio * advantages                         # r_t A_t
    clipped = torch.clamp(ratio, low, high) * advantages   # clip(r_t, low, high) A_t
    loss = -torch.minimum(unclipped, clipped)              # L_t = -min(r_t A_t, clip(r_t) A_t)
    was_clipped = clipped < unclipped
    if dual_clip is not None:
        cap = -dual_clip * advantages  # > 0 where A < 0: the most a bad token may cost
        capped = (advantages < 0) & (loss > cap)
        loss = torch.where(capped, cap, loss)  # the cap is a constant: no gradient in the capped region
        was_clipped = was_clipped | capped
    return loss, was_clipped


def _check_dual_clip(dual_clip: float | None) -> None:
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1 (typically 3); got {dual_clip}")
