r"""Policy losses, token by token, and how per-token losses are reduced to one number.

A loss returns a per-token loss [B, T] (zero where `mask` is 0 is not required; the reducer masks) and a dict
of per-token diagnostic tensors. The reduction is separate (`aggregate_loss`) so that gradient accumulation
over micro-batches divides by the mini-batch's totals, making the result independent of micro-batching.

Notation used in the docstrings below: r_t = pi(a_t) / pi_old(a_t) is the token's importance ratio, A_t its
advantage, and sg[.] a stop-gradient (`detach`). Every ratio is formed from a log-ratio clamped to
[-20, 20], so `exp` cannot overflow for tokens far off-policy. `clipped` in the diagnostics marks tokens
whose gradient the loss removed (1.0) and is what the trainer logs as the clip fraction.

Besides the registered losses, this module holds the token-level helpers a trainer composes with any loss:
`top_entropy_mask` (train only the high-entropy minority), `entropy_bonus`, and `truncated_is_weights`
(rollout-engine vs learner mismatch correction).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from rlvr.registry import Registry

LOSSES: Registry = Registry("policy loss")

LossAggregation = Literal[
    "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"
]

_LOG_RATIO_BOUND = 20.0  # exp(20) ~ 4.9e8: finite in float32/bf16, and far outside any clip range


def _log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    return (logprobs - old_logprobs).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)


def _clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    low: float | torch.Tensor,
    high: float | torch.Tensor,
    dual_clip: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """-min(r*A, clip(r, low, high)*A), capped at -c*A where A < 0 if dual_clip; and the no-gradient mask."""
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, low, high) * advantages
    loss = -torch.minimum(unclipped, clipped)
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


# -- PPO-clip (+ clip-higher, dual-clip) --------------------------------------------------------------------


@LOSSES.register("ppo_clip")
def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2,
    clip_high: Annotated[float, Field(ge=0.0)] = 0.2,
    dual_clip: Annotated[float, Field(gt=1.0)] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""PPO's clipped surrogate, per token (GRPO uses it at token level).

        ratio_t = exp(log pi(a_t) - log pi_old(a_t))
        L_t     = -min(ratio_t * A_t, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A_t)
        dual-clip (A_t < 0 only):  L_t = min(L_t, -c * A_t)                                 c = dual_clip

    `clip_low == clip_high` is the symmetric clip of Schulman et al., "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347. A larger `clip_high` is DAPO's clip-higher (arXiv:2503.14476).
    `dual_clip` (c > 1, typically 3) is Dual-clip PPO from Ye et al., "Mastering Complex Control in MOBA Games
    with Deep Reinforcement Learning", arXiv:1912.09729: for a negative advantage, a ratio far above 1 would
    make -r*A unboundedly large; the loss is capped at -c*A, and the capped region has zero gradient.
    `dual_clip=None` (the default) is exactly the plain clipped surrogate.

    Diagnostics: `clipped` marks tokens whose gradient a clip removed (either clip); `ratio` is the ratio.
    """
    _check_dual_clip(dual_clip)
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    loss, was_clipped = _clipped_surrogate(ratio, advantages, 1.0 - clip_low, 1.0 + clip_high, dual_clip)
    return loss, {"clipped": was_clipped.to(logprobs.dtype), "ratio": ratio.detach()}


# -- DCPO: dynamic per-token clip bounds --------------------------------------------------------------------


def dcpo_ratio_bounds(
    old_logprobs: torch.Tensor, clip_low: float, clip_high: float, max_ratio: float
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""DCPO's ratio bounds for a token whose old probability is q = exp(old_logprobs).

        low(q)  = 0.5 + 0.5 * sqrt(max(1 - 4 * clip_low / q, 0))
        high(q) = min(0.5 + 0.5 * sqrt(1 + 4 * clip_high / q), max_ratio)

    They are the roots near r = 1 of DCPO's constraint |(r - 1) * r * q| <= eps (with r = p/q this is
    |(p/q - 1) * p| <= eps), so low <= 1 <= high always. 1/q is computed as exp(min(-log q, 50)), so q -> 0
    gives finite bounds (low -> 0.5, high -> max_ratio).
    """
    inv_q = torch.exp((-old_logprobs).clamp(max=50.0))
    low = 0.5 + 0.5 * torch.sqrt((1.0 - 4.0 * clip_low * inv_q).clamp(min=0.0))
    high = (0.5 + 0.5 * torch.sqrt(1.0 + 4.0 * clip_high * inv_q)).clamp(max=max_ratio)
    return low, high


@LOSSES.register("dcpo")
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
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    low, high = dcpo_ratio_bounds(old_logprobs.detach(), clip_low, clip_high, max_ratio)
    loss, was_clipped = _clipped_surrogate(ratio, advantages, low, high, dual_clip)
    return loss, {"clipped": was_clipped.to(logprobs.dtype), "ratio": ratio.detach(), "ratio_low": low,
                  "ratio_high": high}


# -- GSPO: sequence-level ratio ----------------------------------------------------------------------------


@LOSSES.register("gspo")
def gspo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 3e-4,
    clip_high: Annotated[float, Field(ge=0.0)] = 4e-4,
    variant: Literal["sequence", "token"] = "sequence",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""GSPO: one length-normalized importance ratio per sequence, clipped at the sequence level.

        s_i       = (pi(y_i) / pi_old(y_i))^(1/|y_i|)
                  = exp( 1/|y_i| * sum_t (log pi(y_it) - log pi_old(y_it)) )
        sequence:  L_i  = -min(s_i * A_i, clip(s_i, 1 - eps_low, 1 + eps_high) * A_i)   (broadcast to tokens)
        token:     s_it = sg[s_i] * pi(y_it) / sg[pi(y_it)]
                   L_it = -min(s_it * A_it, clip(s_it, 1 - eps_low, 1 + eps_high) * A_it)

    The sums run over the sequence's masked tokens only. GSPO-token has the value of s_i on every token but
    the gradient of its own log-prob: d s_it / d log pi(y_it) = s_i, so with A_it = A_i its gradient equals
    the sequence variant's, and it accepts per-token advantages.

    Source: Zheng et al., "Group Sequence Policy Optimization", arXiv:2507.18071 (the GSPO objective and
    GSPO-token); the paper's clip ranges are 3e-4 (left) and 4e-4 (right). Cross-checked with verl's
    `compute_policy_loss_gspo` (verl/trainer/ppo/core_algos.py).

    Aggregation: use `seq_mean_token_mean` (the paper's 1/G sum_i L_i; for the token variant
    1/G sum_i 1/|y_i| sum_t L_it). The ratio is a per-row statistic, so micro-batching by rows is exact.
    This implementation: the sequence variant uses each token's A_it inside the min; pass advantages that are
    constant over a sequence (outcome rewards) to get exactly the paper's sequence objective. A fully masked
    row has s_i = 1 (and contributes nothing after masking).

    Diagnostics: `clipped` (sequence-level, broadcast), `ratio` (s_i, broadcast).
    """
    valid = mask > 0
    token_log_ratio = torch.where(valid, logprobs - old_logprobs, torch.zeros_like(logprobs))
    lengths = valid.sum(dim=1, keepdim=True).clamp(min=1).to(logprobs.dtype)
    seq_log_ratio = (token_log_ratio.sum(dim=1, keepdim=True) / lengths).clamp(-_LOG_RATIO_BOUND,
                                                                                 _LOG_RATIO_BOUND)
    if variant == "sequence":
        ratio = torch.exp(seq_log_ratio).expand_as(logprobs)
    elif variant == "token":
        ratio = torch.exp(seq_log_ratio.detach() + logprobs - logprobs.detach())
    else:
        raise ValueError(f"unknown GSPO variant '{variant}'; expected 'sequence' or 'token'")
    loss, was_clipped = _clipped_surrogate(ratio, advantages, 1.0 - clip_low, 1.0 + clip_high, None)
    return loss, {"clipped": was_clipped.to(logprobs.dtype), "ratio": ratio.detach()}


# -- CPGD: clipped log-ratio policy gradient + policy drift -------------------------------------------------


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
    log_ratio = _log_ratio(logprobs, old_logprobs)
    clipped_log_ratio = log_ratio.clamp(math.log(1.0 - clip_low), math.log1p(clip_high))
    unclipped_term = log_ratio * advantages
    clipped_term = clipped_log_ratio * advantages
    pg = -torch.minimum(unclipped_term, clipped_term)
    ratio = torch.exp(log_ratio)
    drift = ratio - 1.0 - log_ratio
    loss = pg + drift_coef * drift
    was_clipped = (clipped_term < unclipped_term).to(logprobs.dtype)
    return loss, {"clipped": was_clipped, "ratio": ratio.detach(), "drift": drift.detach()}


# -- Entropy mechanism: Clip-Cov and KL-Cov -----------------------------------------------------------------


def token_covariance(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Per-token centered covariance between log-prob and advantage, over the masked tokens given (no grad).

        Cov_t = (log pi(a_t) - mean_s log pi(a_s)) * (A_t - mean_s A_s)            s over tokens with mask 1

    Outside the mask the value is 0. The means are over the tensors passed in (the micro-batch).
    """
    valid = mask > 0
    n = valid.sum().clamp(min=1)
    logp = torch.where(valid, logprobs.detach(), torch.zeros_like(logprobs))
    adv = torch.where(valid, advantages.detach(), torch.zeros_like(advantages))
    cov = (logp - logp.sum() / n) * (adv - adv.sum() / n)
    return torch.where(valid, cov, torch.zeros_like(cov))


@LOSSES.register("clip_cov")
def clip_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 2e-4,
    cov_low: float = 1.0,
    cov_high: float = 5.0,
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0,
    clip_high: Annotated[float, Field(ge=0.0)] = 1.0,
    seed: int = 0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""Clip-Cov: detach the gradient of a few random tokens whose log-prob/advantage covariance is high.

        Cov_t   = (log pi(a_t) - mean log pi) * (A_t - mean A)
        I_clip  = a random subset of {t : cov_low < Cov_t < cov_high, not already clipped},
                  of size max(1, floor(clip_ratio * N_tokens))
        L_t     = sg[ppo_t]  if t in I_clip  else  ppo_t
        ppo_t   = -min(r_t A_t, clip(r_t, 1 - clip_low, 1 + clip_high) A_t)

    Source: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
    arXiv:2505.22617 (section 4, Clip-Cov; entropy change is driven by this covariance, so removing the
    gradient of high-covariance tokens slows entropy collapse). Defaults from the authors' scripts
    (github.com/PRIME-RL/Entropy-Mechanism-of-RL recipe/dapo/7b_clip_cov.sh: clip_cov_ratio = 2e-4, bounds
    1 and 5, and clip_ratio_low = clip_ratio_high = 1, i.e. a loose PPO clip). Selection as in their
    `compute_policy_loss_clip_cov` (also verl's `clip_cov`).

    This implementation: the statistics (means, token count) are over the tensors given, i.e. the micro-batch,
    as in the reference code. Selected tokens keep their loss value but lose their gradient (`sg`, the paper's
    "detach"); the reference code zeroes them, which differs only in the logged loss. Randomness is a fresh
    `torch.Generator().manual_seed(seed)` per call: the same inputs give the same selection, and the selection
    does not depend on any global RNG state.

    Diagnostics: `clipped` (PPO clip or covariance detach), `cov_detached`, `cov`, `ratio`.
    """
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    ppo, ppo_clipped = _clipped_surrogate(ratio, advantages, 1.0 - clip_low, 1.0 + clip_high, None)
    valid = mask > 0
    cov = token_covariance(logprobs, advantages, mask)
    candidates = valid & ~ppo_clipped & (cov > cov_low) & (cov < cov_high)
    flat = torch.nonzero(candidates.reshape(-1), as_tuple=True)[0]
    detach = torch.zeros_like(valid)
    n_valid = int(valid.sum())
    if flat.numel() > 0 and n_valid > 0:
        n_pick = min(max(int(clip_ratio * n_valid), 1), flat.numel())
        generator = torch.Generator().manual_seed(seed)
        picked = flat[torch.randperm(flat.numel(), generator=generator)[:n_pick].to(flat.device)]
        detach.view(-1)[picked] = True
    loss = torch.where(detach, ppo.detach(), ppo)
    return loss, {"clipped": (ppo_clipped | detach).to(logprobs.dtype),
                  "cov_detached": detach.to(logprobs.dtype), "cov": cov, "ratio": ratio.detach()}


@LOSSES.register("kl_cov")
def kl_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    kl_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 2e-3,
    kl_coef: Annotated[float, Field(ge=0.0)] = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""KL-Cov: a KL penalty to the old policy on the top-k tokens by log-prob/advantage covariance.

        Cov_t  = (log pi(a_t) - mean log pi) * (A_t - mean A)
        I_KL   = the max(1, floor(kl_ratio * N_tokens)) tokens with the largest Cov_t
        L_t    = -r_t A_t + beta * |log pi(a_t) - log pi_old(a_t)|   if t in I_KL           beta = kl_coef
                 -r_t A_t                                            otherwise

    Source: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
    arXiv:2505.22617 (section 4, KL-Cov). The KL estimate |log r| and the unclipped surrogate -r*A follow the
    authors' `compute_policy_loss_kl_cov` (github.com/PRIME-RL/Entropy-Mechanism-of-RL, also verl's `kl_cov`).
    Defaults: k = 0.2% (their 7B script's k_percent = 0.2), beta = 1.

    This implementation: statistics are over the tensors given (the micro-batch), as in the reference code;
    ties in Cov are broken by token position (a stable sort), so the selection is deterministic.

    Diagnostics: `kl_penalized` (the selected tokens), `cov`, `ratio`.
    """
    log_ratio = _log_ratio(logprobs, old_logprobs)
    ratio = torch.exp(log_ratio)
    pg = -ratio * advantages
    valid = mask > 0
    cov = token_covariance(logprobs, advantages, mask)
    selected = torch.zeros_like(valid)
    n_valid = int(valid.sum())
    if n_valid > 0:
        k = max(int(kl_ratio * n_valid), 1)
        scores = torch.where(valid, cov, torch.full_like(cov, -math.inf)).reshape(-1)
        order = torch.sort(scores, descending=True, stable=True).indices[:k]
        selected.view(-1)[order] = True
    loss = torch.where(selected, pg + kl_coef * log_ratio.abs(), pg)
    return loss, {"kl_penalized": selected.to(logprobs.dtype), "cov": cov, "ratio": ratio.detach()}


# -- PACS: RLVR as supervised learning --------------------------------------------------------------------


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


# -- token selection, entropy bonus, off-policy correction --------------------------------------------------


def top_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, *, ratio: float = 0.2) -> torch.Tensor:
    r"""Keep only the top-rho fraction of trained tokens by entropy (the "forking" tokens); the rest: mask 0.

        k      = ceil(rho * N_tokens)          N_tokens = number of tokens with mask 1 in the batch given
        mask'  = mask * 1[t among the k highest-entropy masked tokens]

    Source: Wang et al., "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement
    Learning for LLM Reasoning", arXiv:2506.01939: the policy gradient is computed only on the top 20% highest
    entropy tokens of each batch (rho = 0.2).

    This implementation: the selection is over every masked token of the tensors given (the paper's
    batch-level threshold), so the trainer should call it once on the whole rollout batch, not per
    micro-batch. Exactly k tokens are kept: ties are broken by position (row-major, earlier first), so the
    result is deterministic. Entropy is only read (no gradient). Apply to any loss by passing the result as
    its `mask` and to `aggregate_loss`.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"top_entropy_mask: ratio must be in (0, 1]; got {ratio}")
    valid = mask > 0
    n_valid = int(valid.sum())
    keep = torch.zeros_like(valid)
    if n_valid > 0:
        k = min(max(math.ceil(ratio * n_valid - 1e-9), 1), n_valid)  # the epsilon keeps 0.2 * 10 at 2, not 3
        scores = torch.where(valid, entropy.detach().to(torch.float64), torch.full(entropy.shape, -math.inf,
                             dtype=torch.float64, device=entropy.device)).reshape(-1)
        order = torch.sort(scores, descending=True, stable=True).indices[:k]
        keep.view(-1)[order] = True
    return mask * keep.to(mask.dtype)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Per-token entropy-bonus loss term: -H_t on trained tokens, 0 elsewhere.

        L_t = -H(pi(. | s_t)) * mask_t

    Minimizing coef * aggregate_loss(entropy_bonus(H, mask), mask, mode) raises the policy's entropy; `coef`
    can come from a `TargetEntropyController` (rlvr.algorithms.controllers). `entropy` must be differentiable.
    """
    return -entropy * mask


def truncated_is_weights(
    old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, *, cap: float = 2.0
) -> torch.Tensor:
    r"""Truncated importance-sampling weights correcting the rollout engine's mismatch with the learner.

        w_t = min(pi_old(a_t) / pi_behaviour(a_t), C) * mask_t         (no gradient)

    pi_old is the learner's own recomputation of the sampling policy and pi_behaviour the rollout engine's
    (vLLM's, say) log-probs for the same tokens; multiply a loss's per-token value by w_t.

    Source: Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training" (blog, 2025,
    https://fengyao.notion.site/off-policy-rl), truncated importance sampling with C = 2; the same rule is
    verl's rollout correction with `rollout_is_threshold: 2.0` (verl docs/algo/rollout_corr.md).
    """
    if not cap > 0:
        raise ValueError(f"truncated_is_weights: cap must be > 0; got {cap}")
    log_w = (old_logprobs - behaviour_logprobs).detach().clamp(max=math.log(cap))
    return torch.exp(log_w) * mask


# -- reduction ------------------------------------------------------------------------------------------


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggregation = "token_mean",
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    constant_length: float | None = None,
) -> torch.Tensor:
    r"""Reduce a per-token loss [B, T] to a scalar.

    - `token_mean`: sum over all tokens / number of tokens (DAPO's token-level loss).
    - `seq_mean_token_mean`: mean over tokens within each sequence, then over sequences (original GRPO).
    - `seq_mean_token_sum`: sum over tokens within each sequence, mean over sequences.
    - `seq_mean_token_sum_norm`: sum over all tokens / (num_seqs * L), with the constant L = `constant_length`
      (e.g. the generation budget), or the mask's width T when None. This is Dr.GRPO's length-unbiased
      normalizer, Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv:2503.20783.

    `num_tokens` / `num_seqs` override the denominators; gradient accumulation passes the mini-batch's
    totals so that micro-batches add up to exactly the full mini-batch loss. For `seq_mean_token_sum_norm`
    also pass `constant_length`: micro-batches may be padded to different widths T.
    """
    masked = per_token * mask
    if mode == "token_mean":
        denom = mask.sum() if num_tokens is None else num_tokens
        return masked.sum() / max(float(denom), 1.0)
    seq_tokens = mask.sum(dim=1)
    if mode == "seq_mean_token_mean":
        per_seq = masked.sum(dim=1) / seq_tokens.clamp(min=1.0)
    elif mode in ("seq_mean_token_sum", "seq_mean_token_sum_norm"):
        per_seq = masked.sum(dim=1)
    else:
        raise ValueError(f"unknown loss aggregation '{mode}'; expected token_mean, seq_mean_token_mean, "
                         "seq_mean_token_sum or seq_mean_token_sum_norm")
    denom = (seq_tokens > 0).sum() if num_seqs is None else num_seqs
    if mode == "seq_mean_token_sum_norm":
        length = float(mask.shape[-1]) if constant_length is None else float(constant_length)
        if not length > 0:
            raise ValueError(f"seq_mean_token_sum_norm: constant_length must be > 0; got {constant_length}")
        return per_seq.sum() / (max(float(denom), 1.0) * length)
    return per_seq.sum() / max(float(denom), 1.0)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
