"""Advantage estimators: pure functions from per-sample rewards (and group ids) to advantages.

Each estimator's positional parameters name the tensors it needs (see `rlvr.algorithms.inputs.ADVANTAGE_INPUTS`:
`rewards` [N], `group_ids` [N], `correct` [N], `mask` [N, T], ...) and it returns advantages [N] (one per sample)
or [N, T] (per token, zero outside the mask). Config parameters are keyword-only; they are bound once, at registry
lookup. Sums and statistics are taken in float64; no estimator returns NaN.
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field

from rlvr.registry import Registry

ADVANTAGES: Registry = Registry("advantage estimator")


def group_stats(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group mean, unbiased group std (0 for a group of one) and group size, broadcast to [N]."""
    values = values.to(torch.float64)
    num_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    counts = torch.bincount(group_ids, minlength=num_groups).to(values.dtype)
    sums = torch.zeros(num_groups, dtype=values.dtype).index_add_(0, group_ids, values)
    mean = sums / counts.clamp(min=1)
    sq_dev = torch.zeros(num_groups, dtype=values.dtype).index_add_(0, group_ids, (values - mean[group_ids]) ** 2)
    std = (sq_dev / (counts - 1).clamp(min=1)).sqrt()
    return mean[group_ids], std[group_ids], counts[group_ids]


@ADVANTAGES.register("grpo")
def group_normalized_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    std_scope: Literal["group", "batch", "none"] = "group",
    eps: float = 1e-6,
) -> torch.Tensor:
    r"""GRPO's group-normalized advantage.

        A_i = (r_i - mean(r_group)) / (std + eps)

    where std is the unbiased std of the sample's group (`std_scope="group"`, the paper's choice), of the
    whole batch (`"batch"`), or 1 (`"none"`). A group whose rewards are all equal gets advantage 0, and a
    group of one sample gets 0 (its own mean is its baseline).

    Source: Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
    Models", arXiv:2402.03300, section 4.1.2 (outcome supervision).
    """
    mean, std, _ = group_stats(rewards, group_ids)
    centered = rewards.to(torch.float64) - mean
    if std_scope == "group":
        scale = std + eps
    elif std_scope == "batch":
        scale = rewards.to(torch.float64).std(unbiased=True) + eps if rewards.numel() > 1 else torch.tensor(1.0)
    else:
        scale = torch.ones_like(centered)
    return (centered / scale).to(rewards.dtype if rewards.is_floating_point() else torch.float32)


# Estimators that compare samples within a group need at least two samples per prompt.
group_normalized_advantages.needs_group = True  # type: ignore[attr-defined]


# -- shared helpers (private, pure) ------------------------------------------------------------------------

NonNegative = Annotated[float, Field(ge=0)]
Discount = Annotated[float, Field(ge=0, le=1)]


def _out_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The first floating dtype among `tensors` (the reward's), else float32."""
    for t in tensors:
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def _group_sums(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Per-sample sum of `values` over the sample's group, broadcast to [N] (float64)."""
    values = values.to(torch.float64)
    num_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, group_ids, values)
    return sums[group_ids]


def _grpo64(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float) -> torch.Tensor:
    """GRPO's (r - mean_group) / (std_group + eps) in float64; 0 for a group of one or all-equal rewards."""
    mean, std, _ = group_stats(rewards, group_ids)
    return (rewards.to(torch.float64) - mean) / (std + eps)


def _masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries of the whole batch (population std); 0 outside the mask.

    An all-equal (or single-token) batch has numerator 0, so it maps to 0 rather than NaN.
    """
    x = x.to(torch.float64)
    m = mask.to(torch.float64)
    n = m.sum()
    if n == 0:
        return torch.zeros_like(x)
    mean = (x * m).sum() / n
    var = (((x - mean) * m) ** 2).sum() / n
    return torch.where(m > 0, (x - mean) / var.sqrt().clamp(min=eps), 0.0)


def _reverse_discounted_sum(x: torch.Tensor, mask: torch.Tensor, discount: float) -> torch.Tensor:
    """y_t = x_t + discount * y_{t'} along each row, where t' is the next masked position after t.

    Only masked positions are steps of the trajectory (unmasked ones, e.g. prompt, padding or tool-observation
    tokens, are skipped and get 0), so a response may start at any offset and may have gaps.
    """
    m = mask > 0
    x = torch.where(m, x.to(torch.float64), 0.0)
    if discount == 1.0:  # exact and loop-free: a reverse cumulative sum over the masked entries
        return x.flip(-1).cumsum(-1).flip(-1) * m
    out = torch.zeros_like(x)
    running = torch.zeros(x.shape[0], dtype=torch.float64)
    for t in range(x.shape[1] - 1, -1, -1):
        running = torch.where(m[:, t], x[:, t] + discount * running, running)
        out[:, t] = torch.where(m[:, t], running, 0.0)
    return out


def _next_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """values at the next masked position after t in the same row (0 after the row's last masked token)."""
    n, t_len = values.shape
    m = mask > 0
    positions = torch.arange(t_len).expand(n, t_len)
    idx = torch.where(m, positions, torch.full_like(positions, t_len))  # t_len = "no further token"
    suffix_min = idx.flip(-1).cummin(-1).values.flip(-1)  # first masked index >= t
    nxt = torch.cat([suffix_min[:, 1:], torch.full((n, 1), t_len)], dim=1)  # first masked index > t
    padded = torch.cat([values.to(torch.float64), torch.zeros(n, 1, dtype=torch.float64)], dim=1)
    return padded.gather(1, nxt)


def _last_masked_onehot(mask: torch.Tensor) -> torch.Tensor:
    """[N, T] float64 with a 1 on each row's last masked position (all zeros for a fully masked row)."""
    m = mask > 0
    t_len = m.shape[1]
    last = torch.where(m, torch.arange(t_len).expand_as(m), torch.full_like(m, -1, dtype=torch.long)).max(-1).values
    onehot = torch.zeros(m.shape, dtype=torch.float64)
    rows = torch.nonzero(last >= 0).squeeze(-1)
    onehot[rows, last[rows]] = 1.0
    return onehot


def _masked_row_mean(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of x over each row's masked tokens (0 for an empty row) and the token counts, float64."""
    m = mask.to(torch.float64)
    counts = m.sum(-1)
    return (x.to(torch.float64) * m).sum(-1) / counts.clamp(min=1), counts


# -- group baselines without std -------------------------------------------------------------------------


@ADVANTAGES.register("dr_grpo")
def dr_grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    r"""Dr. GRPO: GRPO's group baseline without the std division.

        A_i = r_i - mean_{j in group(i)} r_j

    A group whose rewards are all equal, or a group of one sample, gets 0. (Dr. GRPO's other half, dropping the
    1/|o_i| length normalization, is a loss-aggregation choice, not an advantage.)

    Source: Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv:2503.20783;
    matches OpenRLHF's `dr_grpo` estimator
    (OpenRLHF/OpenRLHF openrlhf/trainer/ppo_utils/experience_maker.py).
    """
    mean, _, _ = group_stats(rewards, group_ids)
    return (rewards.to(torch.float64) - mean).to(_out_dtype(rewards))


dr_grpo_advantages.needs_group = True  # type: ignore[attr-defined]


@ADVANTAGES.register("rloo")
def rloo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    r"""REINFORCE Leave-One-Out: each sample's baseline is the mean of the *other* samples of its prompt.

        A_i = r_i - 1/(k-1) \sum_{j != i} r_j  =  k/(k-1) (r_i - mean_group),    k = group size

    The baseline excludes r_i, so it is independent of the sample it scores (unbiased). A group of one has no
    other sample and gets 0.

    Source: Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human
    Feedback in LLMs", arXiv:2402.14740 (RLOO); estimator from Kool et al., "Buy 4 REINFORCE
    Samples, Get a Baseline for Free!" (ICLR 2019 workshop). Same as OpenRLHF's `rloo`.
    """
    r = rewards.to(torch.float64)
    _, _, counts = group_stats(rewards, group_ids)
    others = _group_sums(r, group_ids) - r
    adv = torch.where(counts > 1, r - others / (counts - 1).clamp(min=1), torch.zeros_like(r))
    return adv.to(_out_dtype(rewards))


rloo_advantages.needs_group = True  # type: ignore[attr-defined]


@ADVANTAGES.register("lite_ppo")
def lite_ppo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    eps: NonNegative = 1e-6,
) -> torch.Tensor:
    r"""Lite PPO's advantage normalization: group-level mean, batch-level std.

        A_i = (r_i - mean_{j in group(i)} r_j) / (std_{j in batch} r_j + eps)

    with the unbiased std of the raw rewards of the whole batch (1 for a batch of one sample). All-equal groups
    and groups of one get 0. (Lite PPO's other half, token-level loss aggregation, is a loss choice.)

    Source: Liu et al., "Part I: Tricks or Traps? A Deep Dive into RL for LLM Reasoning", arXiv:2508.08221
    (Lite PPO); checked against ROLL's `reward_norm(norm_mean_type="group",
    norm_std_type="batch")` (alibaba/ROLL roll/utils/functionals.py). This equals `grpo` with std_scope="batch".
    """
    return group_normalized_advantages(rewards, group_ids, std_scope="batch", eps=eps)


lite_ppo_advantages.needs_group = True  # type: ignore[attr-defined]


# -- REINFORCE++ -----------------------------------------------------------------------------------------


@ADVANTAGES.register("reinforce_pp")
def reinforce_pp_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: Discount = 1.0,
) -> torch.Tensor:
    r"""REINFORCE++: per-token return, normalized over all response tokens of the global batch.

        G_t = \sum_{s >= t} gamma^{s-t} r_s          (r_s = token_rewards: outcome reward on the last token,
                                                       minus the per-token KL penalty if KL is in the reward)
        A_t = (G_t - mean_batch(G)) / std_batch(G)

    mean and (population) std run over every masked token of the batch. Returns [N, T], zero outside the mask;
    an all-equal batch gives 0. This implementation steps only over masked tokens (a tool-observation gap is
    skipped, not discounted) and ignores token_rewards outside the mask.

    Source: Hu et al., "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models",
    arXiv:2501.03262 (v1 title; later versions: "REINFORCE++: Stabilizing Critic-Free Policy Optimization with
    Global Advantage Normalization"); checked against OpenRLHF's `reinforce` estimator
    (openrlhf/trainer/ppo_utils/experience_maker.py: get_cumulative_returns + global advantage whitening).
    """
    returns = _reverse_discounted_sum(token_rewards, mask, gamma)
    return _masked_whiten(returns, mask).to(_out_dtype(token_rewards, mask))


@ADVANTAGES.register("reinforce_pp_baseline")
def reinforce_pp_baseline_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    r"""REINFORCE++-baseline: subtract the prompt's mean outcome reward, then normalize over the global batch.

        r'_t = token_rewards_t - [t = last response token] * mean_{j in group(i)} r_j
        G_t  = \sum_{s >= t} r'_s                      (gamma = 1)
        A_t  = (G_t - mean_batch(G)) / std_batch(G)

    i.e. the group-mean baseline is taken on the outcome reward only (the per-token KL in token_rewards is kept),
    and mean/std run over all masked tokens of the batch. Returns [N, T], zero outside the mask; an all-equal
    group with no KL gives 0. This implementation follows OpenRLHF's `reinforce_baseline` (the paper authors'
    code), which re-centers with the batch mean as well as dividing by the batch std; ms-swift's variant only
    divides by the std of the centered rewards. gamma is fixed to 1 as in OpenRLHF.

    Source: Hu et al., "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models",
    arXiv:2501.03262 (later versions, "REINFORCE++ w/ baseline"); OpenRLHF/OpenRLHF
    openrlhf/trainer/ppo_utils/experience_maker.py (compute_advantages_and_returns, `reinforce_baseline`).
    """
    mean, _, _ = group_stats(rewards, group_ids)
    shifted = token_rewards.to(torch.float64) - mean[:, None] * _last_masked_onehot(mask)
    returns = _reverse_discounted_sum(shifted, mask, 1.0)
    return _masked_whiten(returns, mask).to(_out_dtype(token_rewards, rewards, mask))


reinforce_pp_baseline_advantages.needs_group = True  # type: ignore[attr-defined]


# -- GAE -------------------------------------------------------------------------------------------------


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
    """
    out = torch.where(mask > 0, advantages.to(torch.float64) + values.to(torch.float64), 0.0)
    return out.to(_out_dtype(advantages, values))


# -- KTAE ------------------------------------------------------------------------------------------------


def _fisher_exact_p(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Two-sided Fisher exact test p-value of each 2x2 table [[a, c], [b, d]] (vectorized, float64).

    p = sum of the hypergeometric probabilities of all tables with the same margins that are no more likely
    than the observed one (a relative tolerance of 1e-7 counts ties, as scipy does).
    """
    a, b, c, d = (x.to(torch.float64) for x in (a, b, c, d))
    n = a + b + c + d
    row1 = a + b  # rollouts containing the token
    col1 = a + c  # correct rollouts

    def log_comb(top: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.lgamma(top + 1) - torch.lgamma(k + 1) - torch.lgamma(top - k + 1)

    max_n = int(n.max().item()) if n.numel() else 0
    k = torch.arange(max_n + 1, dtype=torch.float64)[None, :]
    lo = (row1 + col1 - n).clamp(min=0)[:, None]
    hi = torch.minimum(row1, col1)[:, None]
    valid = (k >= lo) & (k <= hi)
    k_safe = torch.where(valid, k, lo)  # keep lgamma arguments in range
    log_pk = log_comb(col1[:, None], k_safe) + log_comb((n - col1)[:, None], row1[:, None] - k_safe) \
        - log_comb(n[:, None], row1[:, None])
    log_obs = (log_comb(col1, a) + log_comb(n - col1, row1 - a) - log_comb(n, row1))[:, None]
    pk = torch.exp(log_pk)
    keep = valid & (log_pk <= log_obs + 1e-7)
    return torch.where(keep, pk, 0.0).sum(-1).clamp(max=1.0)


def _binary_entropy_bits(p: torch.Tensor) -> torch.Tensor:
    """-p log2 p - (1-p) log2 (1-p), with 0 log 0 = 0."""
    def h(x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, -x * torch.log2(x.clamp(min=1e-300)), 0.0)
    return h(p) + h(1 - p)


def _key_token_values(
    ids: torch.Tensor, mask: torch.Tensor, correct: torch.Tensor, *, fisher_weight: float, ig_weight: float,
    use_tf: bool, scale: float, bm25_k1: float = 2.0, bm25_b: float = 0.5,
) -> torch.Tensor:
    """KTAE key-token value of every token position of one group ([n, T] float64, 0 outside the mask)."""
    n_rows = ids.shape[0]
    out = torch.zeros(ids.shape, dtype=torch.float64)
    n_c, n_w = int(correct.sum()), int((~correct).sum())
    if n_c == 0 or n_w == 0 or not mask.any() or fisher_weight + ig_weight == 0:
        return out
    rows = torch.arange(n_rows)[:, None].expand_as(ids)[mask]
    vocab, inv = torch.unique(ids[mask], return_inverse=True)
    counts = torch.zeros(n_rows, vocab.numel(), dtype=torch.float64)
    counts.index_put_((rows, inv), torch.ones(inv.numel(), dtype=torch.float64), accumulate=True)
    present = (counts > 0).to(torch.float64)
    # contingency table per token: a/b = correct/incorrect rollouts containing it, c/d = not containing it
    a, b = present[correct].sum(0), present[~correct].sum(0)
    c, d = n_c - a, n_w - b
    p = _fisher_exact_p(a, b, c, d)
    fisher = torch.where(p < 1.0 - 1e-9, torch.exp(-2.0 * p), 0.0)  # p = 1: no association at all
    n = float(n_c + n_w)
    info_gain = _binary_entropy_bits(torch.full_like(a, n_c / n)) - (
        (a + b) / n * _binary_entropy_bits(a / (a + b).clamp(min=1)) +
        (c + d) / n * _binary_entropy_bits(c / (c + d).clamp(min=1)))
    # direction (and size) of the association: Cohen's h between the token's rates in correct vs incorrect
    direction = torch.asin(torch.sqrt(a / n_c)) - torch.asin(torch.sqrt(b / n_w))
    if use_tf:  # BM25-saturated term frequency in correct vs incorrect rollouts, as a signed ratio
        len_c, len_w = counts[correct].sum(), counts[~correct].sum()
        avg_len = (len_c + len_w) / 2

        def bm25(freq: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
            rel = freq / length.clamp(min=1)
            return rel * (bm25_k1 + 1) / (rel + bm25_k1 * (1 - bm25_b + bm25_b * length / avg_len))

        tf_c, tf_w = bm25(counts[correct].sum(0), len_c), bm25(counts[~correct].sum(0), len_w)
        direction = direction + tf_c / (tf_w + 1e-5) - tf_w / (tf_c + 1e-5)
    raw = (fisher_weight * fisher + ig_weight * info_gain) * direction / (fisher_weight + ig_weight)
    key = scale * (2.0 * torch.sigmoid(raw) - 1.0)
    out[mask] = key[inv]
    return out


@ADVANTAGES.register("ktae")
def ktae_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    correct: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    fisher_weight: NonNegative = 1.0,
    ig_weight: NonNegative = 1.0,
    use_tf: bool = True,
    scale: NonNegative = 1.0,
    eps: NonNegative = 1e-6,
) -> torch.Tensor:
    r"""Key-token Advantage Estimation: GRPO's rollout advantage plus a per-token "key-token value".

    Within each group, for every token id o that appears in the responses, a 2x2 contingency table counts
    rollouts: a = correct containing o, b = incorrect containing o, c = n_correct - a, d = n_incorrect - b.

        F(o)   = exp(-2 p_Fisher(o))   (0 when p = 1)          association strength, Fisher's exact test
        IG(o)  = H(Y) - H(Y | o present)   (bits)               association strength, information gain
        D(o)   = asin sqrt(a/n_c) - asin sqrt(b/n_w)            direction: Cohen's h of the two rates
                 + tf_c/(tf_w + 1e-5) - tf_w/(tf_c + 1e-5)      (if use_tf) BM25 term frequencies, k1=2, b=0.5
        K(o)   = scale * (2 sigmoid((h1 F + h2 IG) D / (h1 + h2)) - 1)        h1 = fisher_weight, h2 = ig_weight
        A_{i,t} = (r_i - mean_group) / (std_group + eps) + K(o_{i,t})

    Returns [N, T], zero outside the mask. A group that is all correct or all incorrect (or of one sample) has
    no key tokens (K = 0) and GRPO advantage 0. Only masked (response) tokens are counted. This implementation
    follows the authors' code: defaults h1 = h2 = 1, TF term on, scale ("top") 1, and "correct" is the
    `correct` input (their code uses reward > 0); it does not zero a model-specific pad-token id, since padding
    is outside the mask here.

    Source: Sun et al., "KTAE: A Model-Free Algorithm to Key-Tokens Advantage Estimation in Mathematical
    Reasoning", arXiv:2505.16826; xiaolizh1/KTAE verl/workers/actor/compute_key_tokens.py and
    verl/trainer/ppo/core_algos.py (compute_ktae_outcome_advantage_and_keytokens).
    """
    m = mask > 0
    ok = correct.bool()
    base = _grpo64(rewards, group_ids, eps)
    adv = torch.where(m, base[:, None], 0.0)
    for g in torch.unique(group_ids).tolist():
        rows = torch.nonzero(group_ids == g).squeeze(-1)
        adv[rows] += _key_token_values(input_ids[rows], m[rows], ok[rows], fisher_weight=fisher_weight,
                                       ig_weight=ig_weight, use_tf=use_tf, scale=scale)
    return adv.to(_out_dtype(rewards, mask))


ktae_advantages.needs_group = True  # type: ignore[attr-defined]


# -- ACE -------------------------------------------------------------------------------------------------


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


# -- positive / negative sample reinforcement ------------------------------------------------------------


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
    return torch.where(ok, torch.tensor(float(positive_weight)), torch.tensor(-1.0)).to(torch.float32)


# -- GRPO-LEAD -------------------------------------------------------------------------------------------


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


# -- ETTRL entropy-based advantage reshaping -------------------------------------------------------------


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
