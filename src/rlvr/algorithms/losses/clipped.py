r"""Clipped token-level surrogates: PPO-clip (with clip-higher and dual-clip), DCPO's probability-dependent
clip bounds, and CPGD's clipped log-ratio with a policy-drift penalty.

Each loss returns the per-token loss [B, T] and per-token diagnostics; `clipped` marks tokens whose gradient
a clip removed.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
from pydantic import Field

from rlvr.algorithms.losses.common import (
    LOSSES,
    _check_dual_clip,
    _clipped_surrogate,
    _log_ratio,
    zero_grad_at_zero_advantage,
)


@LOSSES.register("ppo_clip")
@zero_grad_at_zero_advantage
def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2,
    clip_high: Annotated[float, Field(ge=0.0)] = 0.2,
    dual_clip: Annotated[float, Field(gt=1.0)] | None = None,
    pre_clip: Annotated[float, Field(gt=0.0)] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""PPO's clipped surrogate, per token (GRPO uses it at token level).

        ratio_t = exp(log pi(a_t) - log pi_old(a_t))
        pre-CLIP:  ratio_t = exp(clip(log pi(a_t) - log pi_old(a_t), -delta, delta))          delta = pre_clip
        L_t     = -min(ratio_t * A_t, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A_t)
        dual-clip (A_t < 0 only):  L_t = min(L_t, -c * A_t)                                 c = dual_clip

    `clip_low == clip_high` is the symmetric clip of Schulman et al., "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347. A larger `clip_high` is DAPO's clip-higher (arXiv:2503.14476).
    `dual_clip` (c > 1, typically 3) is Dual-clip PPO from Ye et al., "Mastering Complex Control in MOBA Games
    with Deep Reinforcement Learning", arXiv:1912.09729: for a negative advantage, a ratio far above 1 would
    make -r*A unboundedly large; the loss is capped at -c*A, and the capped region has zero gradient.
    `dual_clip=None` (the default) is exactly the plain clipped surrogate.

    `pre_clip` (delta > 0) is StableReinforce's pre-CLIP from Zhang et al., "R1-Reward: Training Multimodal
    Reward Model Through Stable Reinforcement Learning", arXiv:2505.02835: the log-ratio is clamped to
    [-delta, delta] *before* `exp`, so a token whose probability moved far since sampling cannot produce a huge
    ratio (and, for A < 0, a huge loss and gradient). A clamped token's ratio is the constant exp(+-delta) and
    its gradient is zero. The authors' code (yfzhang114/r1_reward, openrlhf/models/loss.py `PolicyLoss`) clamps
    to [log 1e-3, log 1e3], i.e. delta = ln(1000) = 6.9078. `pre_clip=None` (the default) keeps only the
    learner's fixed overflow guard [-20, 20], bit-identical to the loss without the option.

    Diagnostics: `clipped` marks tokens whose gradient a clip removed (either clip, or pre-CLIP);
    `ratio` is the ratio.
    """
    _check_dual_clip(dual_clip)
    log_ratio = _log_ratio(logprobs, old_logprobs)  # log r_t, guarded to [-20, 20]
    if pre_clip is not None:
        pre_clipped = log_ratio.detach().abs() > pre_clip
        log_ratio = log_ratio.clamp(-pre_clip, pre_clip)  # pre-CLIP: bound log r_t before exp
    ratio = torch.exp(log_ratio)  # r_t = pi(a_t) / pi_old(a_t)
    # L_t = -min(r_t A_t, clip(r_t, 1 - clip_low, 1 + clip_high) A_t), then the dual-clip cap
    loss, was_clipped = _clipped_surrogate(ratio, advantages, 1.0 - clip_low, 1.0 + clip_high, dual_clip)
    if pre_clip is not None:
        was_clipped = was_clipped | pre_clipped
    return loss, {"clipped": was_clipped.to(logprobs.dtype), "ratio": ratio.detach()}


def dcpo_ratio_bounds(
    old_logprobs: torch.Tensor, clip_low: float, clip_high: float, max_ratio: float
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""DCPO's ratio bounds for a token whose old probability is q = exp(old_logprobs).

        low(q)  = 0.5 + 0.5 * sqrt(max(1 - 4 * clip_low / q, 0))
        high(q) = min(0.5 + 0.5 * sqrt(1 + 4 * clip_high / q), max_ratio)

    They are the roots near r = 1 of DCPO's constraint |(r - 1) * r * q| <= eps (with r = p/q this is
    |(p/q - 1) * p| <= eps), so low <= 1 <= high always. 1/q is computed as exp(min(-log q, 50)), so q -> 0
    gives finite bounds (low -> 0.5, high -> max_ratio).

    Source: Yang et al., "DCPO: Dynamic Clipping Policy Optimization", arXiv:2509.02333 ("Dynamic Adaptive
    Clipping").
    """
    inv_q = torch.exp((-old_logprobs).clamp(max=50.0))
    low = 0.5 + 0.5 * torch.sqrt((1.0 - 4.0 * clip_low * inv_q).clamp(min=0.0))
    high = (0.5 + 0.5 * torch.sqrt(1.0 + 4.0 * clip_high * inv_q)).clamp(max=max_ratio)
    return low, high


@LOSSES.register("dcpo")
@zero_grad_at_zero_advantage
def dcpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: Annotated[float, Field(ge=0.0)] = 0.16,
    clip_high: Annotated[float, Field(ge=0.0)] = 0.2,
    max_ratio: Annotated[float, Field(gt=1.0)] = 10.0,
    dual_clip: Annotated[float, Field(gt=1.0)] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""DCPO's dynamic-adaptive clipping: PPO's clipped surrogate, with bounds set by the old probability.

        q_t      = pi_old(a_t)
        low_t    = 0.5 + 0.5 * sqrt(max(1 - 4 eps_low / q_t, 0))
        high_t   = min(0.5 + 0.5 * sqrt(1 + 4 eps_high / q_t), max_ratio)
        L_t      = -min(r_t * A_t, clip(r_t, low_t, high_t) * A_t)

    The bounds come from constraining the probability-weighted importance-sampling deviation
    |(p/q - 1) * p| <= eps instead of PPO's |p/q - 1| <= eps, so rare tokens (small q) get a much wider range:
    for eps_low = 0.16, eps_high = 0.2, q = 0.9 gives r in [0.769, 1.187]; q = 0.01 gives r in [0.5, 5.0].

    Source: Yang et al., "DCPO: Dynamic Clipping Policy Optimization", arXiv:2509.02333 (section "Dynamic
    Adaptive Clipping"; defaults eps_low = 0.16, eps_high = 0.2 from its table). Verified against the authors'
    code, github.com/lime-RL/DCPO verl/trainer/ppo/core_algos.py (`get_clip_low_high`), which also caps the
    upper bound at max(clip_ratio_c, 10): that cap is `max_ratio` here (default 10).

    This implementation: only the clipping part of DCPO is a loss; its smooth advantage standardization is an
    advantage estimator, and its "OTM" loss (1/G sum_i sum_t, no length normalization) is the
    `seq_mean_token_sum` aggregation. The authors' code additionally applies dual-clip (c = 3) for A < 0; that
    is available here as `dual_clip`, off by default as in the paper's formula.

    Diagnostics: `clipped`, `ratio`, and the token's `ratio_low` / `ratio_high` bounds.
    """
    _check_dual_clip(dual_clip)
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))                                 # r_t
    low, high = dcpo_ratio_bounds(old_logprobs.detach(), clip_low, clip_high, max_ratio)  # low_t, high_t
    loss, was_clipped = _clipped_surrogate(ratio, advantages, low, high, dual_clip)      # -min(r A, clip(r) A)
    return loss, {"clipped": was_clipped.to(logprobs.dtype), "ratio": ratio.detach(), "ratio_low": low,
                  "ratio_high": high}


@LOSSES.register("cpgd")
def cpgd_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.2,
    clip_high: Annotated[float, Field(ge=0.0)] = 0.2,
    drift_coef: Annotated[float, Field(ge=0.0)] = 0.01,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""CPGD: a policy-gradient loss on the clipped log-ratio, plus a policy-drift KL to the old policy.

        l_t      = log pi(a_t) - log pi_old(a_t)
        pg_t     = -min(l_t * A_t, clip(l_t, ln(1 - eps_low), ln(1 + eps_high)) * A_t)
        drift_t  = r_t - 1 - l_t          (k3 estimate of KL(pi_old || pi) from tokens sampled by pi_old)
        L_t      = pg_t + alpha * drift_t                                                  alpha = drift_coef

    The gradient of pg_t is -A_t * grad log pi (no importance ratio amplifies it) inside the clip, and zero
    outside it in the direction the advantage pushes; the drift term pulls back with gradient alpha*(r_t - 1).

    Source: Liu et al., "CPGD: Toward Stable Rule-based Reinforcement Learning for Language Models",
    arXiv:2505.12504 (the CPGD objective: min(ln r * A, clip_{ln(1-eps)}^{ln(1+eps)}(ln r) * A) - alpha *
    D_KL(pi_old, pi)). The clipped log-ratio term is checked against the released CPG loss (MM-EUREKA's
    `--use_cpg_loss`, mirrored in opendilab/LightRFT lightrft/models/loss.py), which writes it as
    -A * min(log pi, log pi_old + ln(1+eps)) for A > 0 and -A * max(log pi, log pi_old + ln(1-eps)) for A < 0;
    that differs from pg_t only by the constant A * log pi_old.

    This implementation: the drift KL is estimated per token with k3 (unbiased, >= 0) and is unclipped; the
    authors' code has a `policy_drift_clip_eps` whose exact form I could not read, so it is not reproduced.
    `drift_coef` defaults to 0.01, MM-EUREKA's documented `--policy_drift_coef`. CPGD's own advantage
    weighting belongs to an advantage estimator. The paper sums tokens within a response
    (`seq_mean_token_sum`); the released code averages over all tokens (`token_mean`); this per-token loss
    works with either.

    Diagnostics: `clipped`, `ratio`, `drift` (the per-token drift estimate).
    """
    log_ratio = _log_ratio(logprobs, old_logprobs)                                        # l_t
    clipped_log_ratio = log_ratio.clamp(math.log(1.0 - clip_low), math.log1p(clip_high))  # clip(l_t)
    unclipped_term = log_ratio * advantages                                               # l_t A_t
    clipped_term = clipped_log_ratio * advantages                                         # clip(l_t) A_t
    pg = -torch.minimum(unclipped_term, clipped_term)                                     # pg_t
    ratio = torch.exp(log_ratio)                                                          # r_t
    drift = ratio - 1.0 - log_ratio                                                       # drift_t (k3)
    loss = pg + drift_coef * drift                                                        # L_t
    was_clipped = (clipped_term < unclipped_term).to(logprobs.dtype)
    return loss, {"clipped": was_clipped, "ratio": ratio.detach(), "drift": drift.detach()}
