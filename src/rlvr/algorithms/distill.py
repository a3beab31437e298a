r"""Learning from a teacher: KDRL (reward + reverse KL to the teacher), on-policy distillation, GKD.

Notation: y ~ pi_s are tokens sampled from the student (the policy); pi_t is a frozen teacher that shares the
student's tokenizer (`rlvr.models.teacher.check_same_tokenizer`). Per token, with
log r = log pi_t(y_t) - log pi_s(y_t) (Schulman, "Approximating KL Divergence",
http://joschu.net/blog/kl-approx.html; samples from pi_s, so these estimate the reverse KL(pi_s || pi_t)):

    k1 = -log r                    value unbiased, can be negative; grad = grad log pi_s (zero in expectation)
    k2 = (log r)^2 / 2             value biased, >= 0;  grad = -log r * grad log pi_s  (the exact reverse-KL
                                    policy gradient on student samples: E_pi_s[(log pi_s - log pi_t) grad log pi_s])
    k3 = r - 1 - log r             value unbiased, >= 0; grad = (1 - r) grad log pi_s (in expectation the gradient
                                    of the forward KL(pi_t || pi_s), not of the reverse one)

(Brief's "k1 = log r" has the sign of KL(pi_t || pi_s); with r = pi_t/pi_s on student samples the reverse-KL
estimator is -log r, as above and as in `rlvr.algorithms.kl.kl_penalty`, which these reuse with the teacher in
place of the reference.)

Pieces, each a pure function; the registered ones are picked by name in a config:

- `kdrl` (LOSSES): PPO/GRPO's clipped surrogate plus beta * masked k-estimator of KL(pi_s || pi_t).
- `kd_coefficient`: beta as a pure function of the step (constant, linear, cosine).
- `kd_sample_mask`: KDRL's reward-guided masking (KD on every sample, only incorrect ones, or only unsolved
  groups).
- `on_policy_distill` (ADVANTAGES): A_t = -(log pi_s(y_t) - log pi_t(y_t)); no reward.
- `generalized_jsd`: GKD's JSD(beta) between full token distributions (needs logits [N, T, V]).
- `teacher_top_k`, `top_k_buckets`: GKD's teacher shipped compactly (its top-k log-probs plus one tail bucket)
  and the (k + 1)-category view of both distributions the JSD is then taken on.
- `gkd_use_student_samples`: GKD's on-policy fraction lambda as a seeded per-step coin.
"""

from __future__ import annotations

import functools
import math
import random
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from rlvr.algorithms.advantages.common import ADVANTAGES, Discount, NonNegative, _reverse_discounted_sum
from rlvr.algorithms.kl import kl_penalty
from rlvr.algorithms.losses.common import LOSSES, _clipped_surrogate, _log_ratio

KDMasking = Literal["none", "incorrect", "unsolved_group"]
KDSchedule = Literal["constant", "linear", "cosine"]


def teacher_kl(logprobs: torch.Tensor, teacher_logprobs: torch.Tensor,
               estimator: Literal["k1", "k2", "k3"] = "k2") -> torch.Tensor:
    """Per-token estimate of the reverse KL(pi_s || pi_t) on student samples (module docstring: k1, k2, k3).

    Differentiable in `logprobs` (the student's current log-probs); the teacher's are constants.
    """
    if estimator not in ("k1", "k2", "k3"):
        raise ValueError(f"unknown teacher KL estimator '{estimator}'; expected k1, k2 or k3 (reverse KL)")
    return kl_penalty(logprobs, teacher_logprobs.detach(), estimator)


def kd_coefficient(step: int, *, schedule: KDSchedule = "constant", start: float = 5e-3, end: float = 1e-3,
                   total_steps: int = 1) -> float:
    r"""The KD coefficient beta at `step` (0-based), annealed from `start` to `end` over `total_steps`.

        constant:  beta = start
        linear:    beta = start + (end - start) * min(step / total_steps, 1)
        cosine:    beta = end + (start - end) * (1 + cos(pi * min(step / total_steps, 1))) / 2

    After `total_steps` the coefficient stays at `end`. KDRL anneals beta from 5e-3 to 1e-3 (the defaults
    here; the values from summaries of Xu et al., arXiv:2506.02208, the exact shape unchecked), so imitation
    dominates early and the reward later.
    """
    if total_steps < 1:
        raise ValueError(f"kd_coefficient: total_steps must be >= 1; got {total_steps}")
    if step < 0:
        raise ValueError(f"kd_coefficient: step must be >= 0; got {step}")
    frac = min(step / total_steps, 1.0)
    if schedule == "constant":
        return float(start)
    if schedule == "linear":
        return float(start + (end - start) * frac)
    if schedule == "cosine":
        return float(end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * frac)))
    raise ValueError(f"unknown KD schedule '{schedule}'; expected constant, linear or cosine")


def kd_sample_mask(correct: torch.Tensor, group_ids: torch.Tensor, masking: KDMasking = "none") -> torch.Tensor:
    r"""[N] float: 1 on the samples the KD term applies to (KDRL's reward-guided masking).

        none:            m_i = 1
        incorrect:       m_i = [y_i is incorrect]                   (response level: no KD on solved answers)
        unsolved_group:  m_i = [no sample of i's group is correct]  (group level: KD only where RL has no signal)

    The idea (Xu et al., KDRL, arXiv:2506.02208, "reward-guided KD"): a correct answer already gets a positive
    RL signal, so pulling it towards the teacher only over-regularizes; KD is kept where the student fails.
    This implementation: I could read only secondary summaries of that section ("suppresses KD on correct
    responses"); the group-level variant is this module's, for the case where GRPO's advantage is zero.
    """
    wrong = ~correct.bool()
    if masking == "none":
        return torch.ones(correct.shape, dtype=torch.float32, device=correct.device)
    if masking == "incorrect":
        return wrong.to(torch.float32)
    if masking == "unsolved_group":
        gid = torch.unique(group_ids, return_inverse=True)[1]
        solved = torch.zeros(int(gid.max()) + 1 if gid.numel() else 0, dtype=torch.long, device=gid.device)
        solved = solved.index_add(0, gid, correct.bool().long())
        return (solved[gid] == 0).to(torch.float32)
    raise ValueError(f"unknown KD masking '{masking}'; expected none, incorrect or unsolved_group")


@LOSSES.register("kdrl")
def kdrl_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    correct: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    kd_coef: NonNegative = 5e-3,
    kd_estimator: Literal["k1", "k2", "k3"] = "k2",
    kd_masking: KDMasking = "none",
    clip_low: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2,
    clip_high: Annotated[float, Field(ge=0.0)] = 0.2,
    kd_schedule: KDSchedule = "constant",
    kd_coef_end: NonNegative = 1e-3,
    kd_schedule_steps: Annotated[int, Field(ge=1)] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""KDRL: GRPO's clipped surrogate plus a reverse-KL pull towards the teacher, per token.

        J_KDRL = J_GRPO - beta * D_KL(pi_s || pi_t)
        L_t    = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t) + beta * m_i * k(t)

    r_t = pi_s(y_t) / pi_old(y_t), A_t the advantage (GRPO's from the verifiable reward), k(t) the k1/k2/k3
    estimator of KL(pi_s || pi_t) on the current student's log-probs (module docstring), m_i the reward-guided
    mask (`kd_sample_mask`). The KL term is differentiated as written, like the GRPO paper's KL-to-reference:
    k2 (the paper's choice) gives the unbiased reverse-KL gradient (log pi_s - log pi_t) grad log pi_s.

    Source: Xu et al., "KDRL: Post-Training Reasoning LLMs via Unified Knowledge Distillation and Reinforcement
    Learning", arXiv:2506.02208 (objective J_GRPO - beta D_k2(pi_s || pi_t); beta annealed 5e-3 -> 1e-3 and
    reward-guided masking, which I could read only in summaries of the paper, not in its text or code).
    The schedule: `kd_schedule` (constant, linear, cosine) anneals beta from `kd_coef` at step 0 to
    `kd_coef_end` at `kd_schedule_steps` (default: train.steps). The learner reads these three knobs and, at
    each RL step t (0-based), rebinds `kd_coef=kd_coefficient(t, schedule=kd_schedule, start=kd_coef,
    end=kd_coef_end, total_steps=kd_schedule_steps)` (`scheduled_loss`); called directly, this function uses
    `kd_coef` as given and ignores them.

    Diagnostics: `clipped`, `ratio` (as ppo_clip) and `teacher_kl` (k(t), detached, before the mask).
    """
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs))
    pg, was_clipped = _clipped_surrogate(ratio, advantages, 1.0 - clip_low, 1.0 + clip_high, None)
    kl = teacher_kl(logprobs, teacher_logprobs, kd_estimator)              # k(t), reverse KL to the teacher
    rows = kd_sample_mask(correct, group_ids, kd_masking).to(device=logprobs.device, dtype=logprobs.dtype)
    loss = pg + kd_coef * rows[:, None] * kl                                # L_t = L_pg + beta m_i k(t)
    return loss, {"clipped": was_clipped.to(logprobs.dtype), "ratio": ratio.detach(), "teacher_kl": kl.detach()}


@ADVANTAGES.register("on_policy_distill")
def on_policy_distill_advantages(
    teacher_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    coef: Annotated[float, Field(gt=0.0)] = 1.0,
    gamma: Discount = 0.0,
) -> torch.Tensor:
    r"""On-policy distillation: the per-token advantage is the negative reverse KL to the teacher.

        A_t = -coef * (log pi_s(y_t) - log pi_t(y_t))                                   gamma = 0 (default)
        A_t = -coef * sum_{s >= t} gamma^{s-t} (log pi_s(y_s) - log pi_t(y_s))           gamma > 0

    on tokens y ~ pi_s (the student that sampled, `old_logprobs`). No reward is needed: the teacher grades
    every token. With a policy-gradient loss, E[A_t grad log pi_s(y_t)] is minus the gradient of the
    per-token reverse KL (a k1 "reward"), the on-policy special case of GKD (lambda = 1, beta = 1).
    Returns [N, T], zero outside the mask.

    Source: Agarwal et al., "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes",
    arXiv:2306.13649 (GKD); Lu and Thinking Machines Lab, "On-Policy Distillation" (2025 blog post:
    per-token reverse KL as the advantage, discount 0); prime-rl / slime's `opd`. gamma > 0 sums future
    per-token terms (the return of the reverse-KL reward), an option of this implementation.
    """
    per_token = (old_logprobs - teacher_logprobs).to(torch.float64)        # log pi_s - log pi_t
    if gamma == 0.0:  # the default: no sum over future tokens, so no loop (and any device)
        adv = -coef * torch.where(mask > 0, per_token, 0.0)
    else:
        adv = -coef * _reverse_discounted_sum(per_token.cpu(), mask.cpu(), gamma).to(per_token.device)
    dtype = old_logprobs.dtype if old_logprobs.is_floating_point() else torch.float32
    return adv.to(dtype)


def generalized_jsd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: float = 0.5,
    temperature: float = 1.0,
) -> torch.Tensor:
    r"""GKD's generalized Jensen-Shannon divergence per token over the full vocabulary: [N, T] (0 off-mask).

        M      = beta * P_t + (1 - beta) * P_s                  (mixture; P_t teacher, P_s student)
        JSD_b  = beta * KL(P_t || M) + (1 - beta) * KL(P_s || M)          0 < beta < 1
        beta = 0:  KL(P_t || P_s)   forward KL (mass covering)
        beta = 1:  KL(P_s || P_t)   reverse KL (mode seeking)

    P = softmax(logits / temperature) at each position; logits are [N, T, V]. Inside (0, 1), JSD_b / beta ->
    KL(P_t || P_s) as beta -> 0 and JSD_b / (1 - beta) -> KL(P_s || P_t) as beta -> 1 (JSD_b itself goes to
    0 at both ends), so the endpoints are defined as the plain KLs, as in the paper's framing and TRL's
    GKDTrainer. Differentiable in both logits; the trainer detaches the teacher's.

    Source: Agarwal et al., "On-Policy Distillation of Language Models: Learning from Self-Generated
    Mistakes", arXiv:2306.13649, eq. (1) with P = teacher, Q = student; convention checked against TRL's
    `GKDTrainer.generalized_jsd_loss` (beta = 0 forward KL, beta = 1 reverse KL).
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"generalized_jsd: beta must be in [0, 1] (0 forward KL, 1 reverse KL); got {beta}")
    if not temperature > 0.0:
        raise ValueError(f"generalized_jsd: temperature must be > 0; got {temperature}")
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"generalized_jsd: student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} differ; do the two models share a tokenizer?")
    log_s = F.log_softmax(student_logits / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits / temperature, dim=-1)

    def kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:  # KL(P || Q) per position
        p = log_p.exp()
        return torch.where(p > 0, p * (log_p - log_q), 0.0).sum(-1)  # 0 log 0 = 0 (a logit of -inf)

    if beta == 0.0:
        per_token = kl(log_t, log_s)
    elif beta == 1.0:
        per_token = kl(log_s, log_t)
    else:
        log_m = torch.logsumexp(torch.stack([log_t + math.log(beta), log_s + math.log(1.0 - beta)]), dim=0)
        per_token = beta * kl(log_t, log_m) + (1.0 - beta) * kl(log_s, log_m)
    return per_token * mask.to(per_token.dtype)


def scheduled_loss(loss_fn, step: int, default_steps: int):
    """`loss_fn` (a `functools.partial` bound by the registry) with KDRL's coefficient for RL step `step`
    (0-based): kd_coef = kd_coefficient(step, schedule=kd_schedule, start=kd_coef, end=kd_coef_end,
    total_steps=kd_schedule_steps or default_steps). Losses without a non-constant `kd_schedule` pass unchanged."""
    kw = getattr(loss_fn, "keywords", {})
    if kw.get("kd_schedule", "constant") == "constant":
        return loss_fn
    coef = kd_coefficient(step, schedule=kw["kd_schedule"], start=kw.get("kd_coef", 5e-3),
                          end=kw.get("kd_coef_end", 1e-3), total_steps=kw.get("kd_schedule_steps") or default_steps)
    return functools.partial(loss_fn.func, **{**kw, "kd_coef": coef})


def teacher_top_k(teacher_logprobs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The teacher's next-token distribution in compact form: its k most likely tokens and one tail bucket.

        K_t       = the k tokens of largest log P_t(. | y_<t)            (ties: torch.topk's order)
        values    = log P_t(i | y_<t) for i in K_t                       [M, k]
        ids       = K_t                                                  [M, k] int32
        tail      = log sum_{i not in K_t} P_t(i | y_<t)                 [M]   (-inf when k >= V)

    `teacher_logprobs` are [M, V] log-probs (already at the sampling temperature). k is clipped to V. Shipping
    this costs M * (8k + 4) bytes instead of M * 4V (fp32 values and int32 ids)."""
    if k < 1:
        raise ValueError(f"teacher_top_k: k must be >= 1 (0 means the full vocabulary, not this function); got {k}")
    k = min(int(k), teacher_logprobs.shape[-1])
    values, ids = teacher_logprobs.topk(k, dim=-1)
    tail = teacher_logprobs.scatter(-1, ids, float("-inf")).logsumexp(-1)
    return values, ids.to(torch.int32), tail


def top_k_buckets(student_logits: torch.Tensor, teacher_values: torch.Tensor, teacher_ids: torch.Tensor,
                  teacher_tail: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Student and teacher as distributions over the k + 1 buckets {i_1, ..., i_k, tail} of the teacher's top k.

        P_s^K = (P_s(i_1), ..., P_s(i_k), 1 - sum_j P_s(i_j))          student: exact, from its full logits
        P_t^K = (P_t(i_1), ..., P_t(i_k), 1 - sum_j P_t(i_j))          teacher: `teacher_top_k`'s values and tail

    Returns log P_s^K and log P_t^K, [M, k + 1] each ([M, k] when k = V: no tail bucket, and the two are the full
    distributions with the vocabulary permuted). GKD's JSD_beta of these is an approximation of the full one:
    merging the tail tokens into one category can only lower an f-divergence (data-processing inequality), so
    JSD_beta(P_t^K, P_s^K) <= JSD_beta(P_t, P_s), with equality at k = V. Differentiable in `student_logits`."""
    log_s = F.log_softmax(student_logits, dim=-1)
    ids = teacher_ids.long()
    s_top = log_s.gather(-1, ids)
    if ids.shape[-1] >= log_s.shape[-1]:  # every token is in the top k: nothing left for a tail bucket
        return s_top, teacher_values
    s_tail = log_s.scatter(-1, ids, float("-inf")).logsumexp(-1)
    return torch.cat([s_top, s_tail[..., None]], -1), torch.cat([teacher_values, teacher_tail[..., None]], -1)


@LOSSES.register("gkd")
def gkd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    *,
    beta: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5,
    teacher_top_k: Annotated[int, Field(ge=0)] = 0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    r"""GKD: the generalized JSD between the student's and the teacher's next-token distributions, per token.

        L_t = JSD_beta(P_t(. | y_<t) || P_s(. | y_<t))         (`generalized_jsd`; beta 0 forward KL, 1 reverse)

    Inputs are full-vocabulary logits of the response tokens, [M, V] (M tokens of one chunk; already divided
    by the sampling temperature); the teacher's are constants. The learner runs this loss on its own path
    (`Learner._gkd_backward`): it computes the student's decoder states once, then the LM head, the teacher's
    logits and this loss chunk by chunk of tokens, backpropagating each chunk into the states, so the logits
    memory is one chunk's, not N*T*V. Returns ([M] per token, {"gkd_jsd": detached}).

    `teacher_top_k` = k > 0 (read by the learner; this function ignores it): the teacher is kept only as its
    top-k log-probs and a tail bucket (`teacher_top_k`), and the learner passes the (k + 1)-bucket views of both
    models (`top_k_buckets`) as the two "logits" here; an approximation (a lower bound) of the full JSD, exact at
    k = V. It is how a teacher on a Ray actor (distributed.reference_worker) ships compactly; 0 = full vocabulary.

    Source: Agarwal et al., "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes",
    arXiv:2306.13649, eq. (1) and Algorithm 1 (the lambda mix of student and dataset outputs is the `gkd`
    batch sampler's job, `rlvr.sampling.distill`).
    """
    ones = torch.ones(student_logits.shape[:-1], dtype=student_logits.dtype, device=student_logits.device)
    per_token = generalized_jsd(student_logits[None], teacher_logits.detach()[None], ones[None], beta=beta)[0]
    return per_token, {"gkd_jsd": per_token.detach()}


def gkd_use_student_samples(step: int, *, lmbda: float = 1.0, seed: int = 0) -> bool:
    r"""GKD's data choice for one step: True -> train on the student's own samples, False -> on the fixed
    dataset's (or the teacher's) outputs. P(True) = lambda; a seeded coin per (seed, step), so a resumed run
    makes the same choices.

    Source: Agarwal et al., arXiv:2306.13649, Algorithm 1 (lambda = student data fraction; lambda = 1 is pure
    on-policy distillation, lambda = 0 supervised KD).
    """
    if not 0.0 <= lmbda <= 1.0:
        raise ValueError(f"gkd lambda must be in [0, 1]; got {lmbda}")
    return random.Random(seed * 1_000_003 + step).random() < lmbda
