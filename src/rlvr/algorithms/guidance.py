r"""Policy losses for batches that mix on-policy samples with off-policy guidance (`Batch.off_policy`).

Off-policy rows are external solutions (see rlvr.sampling.guidance): their behaviour log-probs are 0
(pi_behaviour treated as 1), so an importance ratio pi/pi_old on them is just pi. Each loss below trains
on-policy rows with PPO's clipped surrogate and says what it does on off-policy rows. Notation as in
rlvr.algorithms.losses: r_t = pi(a_t)/pi_old(a_t), A_t the advantage, sg[.] a stop-gradient.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field

from rlvr.algorithms.losses.common import LOSSES, _clipped_surrogate, _log_ratio


def _rows(off_policy: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[N] bool -> [N, 1] float on `like`'s device, for broadcasting over tokens."""
    return off_policy.to(device=like.device, dtype=like.dtype)[:, None]


def _on_policy_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                         clip_low: float, clip_high: float, clip: bool) -> tuple[torch.Tensor, torch.Tensor,
                                                                                  torch.Tensor]:
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    if clip:
        loss, was_clipped = _clipped_surrogate(ratio, advantages, 1.0 - clip_low, 1.0 + clip_high, None)
    else:
        loss, was_clipped = -ratio * advantages, torch.zeros_like(ratio, dtype=torch.bool)
    return loss, was_clipped, ratio


@LOSSES.register("luffy")
def luffy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    off_policy: torch.Tensor,
    *,
    gamma: Annotated[float, Field(gt=0.0)] = 0.1,
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2,
    clip_high: Annotated[float, Field(ge=0.0)] = 0.2,
    on_policy_clip: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""LUFFY: mixed-policy GRPO with regularized importance sampling (policy shaping) on off-policy tokens.

        on-policy token:   L_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)
                           (on_policy_clip = False: L_t = -r_t A_t, the released script's loss_remove_clip)
        off-policy token:  L_t = -f(pi(a_t)) A_t,      f(p) = p / (p + gamma)

    With pi_behaviour taken as 1 the plain importance ratio of an off-policy token is pi(a_t) itself, whose
    gradient grad p = p * grad log p vanishes on the low-probability tokens an external solution is full
    of. The shaping has gradient grad f(p) = gamma/(p + gamma)^2 * grad p: for p << gamma that is
    grad p / gamma (low-probability tokens amplified 1/gamma times), for p >> gamma it shrinks to
    (gamma/p^2) grad p (confident tokens are not pushed further). It is never clipped.

    Source: Yan et al., "Learning to Reason under Off-Policy Guidance", arXiv:2504.14945 (section 3, policy
    shaping via regularized importance sampling, gamma = 0.1). Checked against the authors' code,
    github.com/ElliottYan/LUFFY luffy/verl/verl/mix_src/mix_core_alg.py `compute_token_on_off_policy_loss`
    with off_policy_reshape = "p_div_p_0.1"; their script also sets loss_remove_clip = True (no clip on the
    on-policy ratio either), available here as `on_policy_clip: false`.

    Diagnostics: `clipped` (on-policy tokens whose gradient the clip removed), `ratio` (r_t on on-policy
    tokens, f(p) on off-policy ones), `off_policy_prob` (pi(a_t) on off-policy tokens, 0 elsewhere).
    """
    on_loss, was_clipped, ratio = _on_policy_surrogate(logprobs, old_logprobs, advantages, clip_low, clip_high,
                                                       on_policy_clip)
    prob = torch.exp(logprobs.clamp(max=0.0))
    shaped = prob / (prob + gamma)
    off_loss = -shaped * advantages
    off = _rows(off_policy, logprobs)
    loss = off * off_loss + (1.0 - off) * on_loss
    return loss, {"clipped": was_clipped.to(logprobs.dtype) * (1.0 - off),
                  "ratio": torch.where(off > 0, shaped, ratio).detach(),
                  "off_policy_prob": (prob * off).detach()}


@LOSSES.register("rl_plus")
def rl_plus_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    off_policy: torch.Tensor,
    *,
    exploration_gamma: Annotated[float, Field(ge=0.0)] = 0.5,
    max_ratio: Annotated[float, Field(gt=0.0)] | None = None,
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2,
    clip_high: Annotated[float, Field(ge=0.0)] = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""RL-PLUS: multiple importance sampling and an exploration-based advantage on external (off-policy) data.

        on-policy token:   L_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)
        off-policy token:  L_t = -w_t A_t (1 - sg[pi(a_t)])^gamma
                           w_t = pi(a_t) / (1/2 pi_old(a_t) + 1/2 omega_t),   omega_t = (pi_old(a_t) + 1) / 2
                           (w_t capped at `max_ratio` when given)

    The external data's behaviour policy is unknown; multiple importance sampling weighs the token under a
    mixture of the old policy and an estimate omega of the external policy (itself the old policy mixed with
    a deterministic one, probability 1 on the given token), which keeps w bounded (w <= 4/3 pi / (pi_old +
    1/3)) where the plain ratio pi / pi_old would explode on tokens the policy finds unlikely. The factor
    (1 - pi)^gamma is the exploration-based advantage: tokens the policy already finds likely teach little,
    hard-to-reach tokens get the full advantage. `old_logprobs` must be the old policy's log-probs on the
    external tokens (train.recompute_old_logprobs: true; a guidance sample's behaviour log-probs are 0).

    Source: Dong et al., "RL-PLUS: Countering Capability Boundary Collapse of LLMs in Reinforcement Learning
    with Hybrid-policy Optimization", arXiv:2508.00222 (multiple importance sampling, section 3.1;
    exploration-based advantage function, section 3.2). Checked against the authors' code,
    github.com/YihongDong/RL-PLUS `rlplus_core_alg.py` (off_policy_strategy "RL-PLUS": the same mixture and
    exponent 0.5). Differences: their advantages normalize with the on-policy samples' group statistics only;
    here the advantage estimator chosen in the recipe sees the whole mixed group (as for `luffy`).

    Diagnostics: `clipped` (on-policy), `ratio` (r_t on on-policy tokens, w_t on off-policy ones),
    `off_policy_prob` (pi(a_t) on off-policy tokens, 0 elsewhere).
    """
    on_loss, was_clipped, ratio = _on_policy_surrogate(logprobs, old_logprobs, advantages, clip_low, clip_high,
                                                       True)
    prob = torch.exp(logprobs.clamp(max=0.0))
    old_prob = torch.exp(old_logprobs.clamp(max=0.0))
    omega = 0.5 * (old_prob + 1.0)
    weight = prob / (0.5 * old_prob + 0.5 * omega)
    if max_ratio is not None:
        weight = weight.clamp(max=max_ratio)
    explore = (1.0 - prob.detach()).clamp(min=0.0) ** exploration_gamma
    off_loss = -weight * advantages * explore
    off = _rows(off_policy, logprobs)
    loss = off * off_loss + (1.0 - off) * on_loss
    return loss, {"clipped": was_clipped.to(logprobs.dtype) * (1.0 - off),
                  "ratio": torch.where(off > 0, weight, ratio).detach(),
                  "off_policy_prob": (prob * off).detach()}


def adaptive_sft_coef(logprobs: torch.Tensor, mask: torch.Tensor, off_policy: torch.Tensor, coef: float,
                      scale: float) -> torch.Tensor:
    r"""lambda = coef * d / (d + scale), d = sg(mean NLL of the off-policy tokens given) (0 if there are none)."""
    off = _rows(off_policy, logprobs) * mask
    count = off.sum()
    if float(count) == 0.0:
        return torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    nll = (-(logprobs.detach()) * off).sum() / count
    return coef * nll / (nll + scale)


@LOSSES.register("sft_mix")
def sft_mix_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    off_policy: torch.Tensor,
    *,
    sft_coef: Annotated[float, Field(ge=0.0)] = 1.0,
    adaptive: bool = True,
    nll_scale: Annotated[float, Field(gt=0.0)] = 1.0,
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2,
    clip_high: Annotated[float, Field(ge=0.0)] = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""RL on the policy's own samples plus supervised NLL on demonstrations, with an adaptive SFT weight.

        on-policy token:   L_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)
        off-policy token:  L_t = lambda * (-log pi(a_t))                    (its advantage is not used)
        lambda = sft_coef * d / (d + nll_scale)     if adaptive             d = sg(mean_t -log pi(a_t)) over
               = sft_coef                           otherwise                   the off-policy tokens given

    The adaptation rule, computed from batch statistics only (no state, so checkpoints need nothing): the
    further the policy is from the demonstrations (large NLL d), the more weight SFT gets; as the policy
    absorbs them (d -> 0) the SFT term fades and RL takes over. d is over the tensors given (a micro-batch
    of whole groups).

    Source: Chen et al., "Step-wise Adaptive Integration of Supervised Fine-tuning and Reinforcement Learning
    for Task-Specific LLMs", arXiv:2505.13026 (SASR: SFT and GRPO integrated step by step, weighted by the
    model's training state). SASR itself picks SFT or GRPO per step with a probability set from gradient
    norms relative to its SFT warm-up and the divergence from the initial distribution; that needs learner
    state across steps, so this loss uses the per-batch NLL of the demonstrations as the divergence signal
    instead (a SASR-style rule, not SASR's exact schedule).

    Diagnostics: `clipped` (on-policy), `ratio` (on-policy), `sft_coef` (lambda, broadcast), `sft_nll`
    (-log pi on off-policy tokens).
    """
    on_loss, was_clipped, ratio = _on_policy_surrogate(logprobs, old_logprobs, advantages, clip_low, clip_high,
                                                       True)
    off = _rows(off_policy, logprobs)
    lam = (adaptive_sft_coef(logprobs, mask, off_policy, sft_coef, nll_scale) if adaptive
           else torch.tensor(sft_coef, dtype=logprobs.dtype, device=logprobs.device))
    nll = -logprobs
    loss = off * lam * nll + (1.0 - off) * on_loss
    return loss, {"clipped": was_clipped.to(logprobs.dtype) * (1.0 - off), "ratio": ratio.detach(),
                  "sft_coef": lam.detach().expand_as(logprobs), "sft_nll": (nll * off).detach()}
