r"""Key-token advantage estimation (KTAE): GRPO's advantage plus a per-token value from statistics of which
token ids separate a group's correct rollouts from its incorrect ones.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages.common import ADVANTAGES, NonNegative, _grpo64, _out_dtype


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
    k = torch.arange(max_n + 1, dtype=torch.float64, device=n.device)[None, :]
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
    out = torch.zeros(ids.shape, dtype=torch.float64, device=ids.device)
    n_c, n_w = int(correct.sum()), int((~correct).sum())
    if n_c == 0 or n_w == 0 or not mask.any() or fisher_weight + ig_weight == 0:
        return out
    rows = torch.arange(n_rows, device=ids.device)[:, None].expand_as(ids)[mask]
    vocab, inv = torch.unique(ids[mask], return_inverse=True)
    counts = torch.zeros(n_rows, vocab.numel(), dtype=torch.float64, device=ids.device)
    counts.index_put_((rows, inv), torch.ones(inv.numel(), dtype=torch.float64, device=ids.device), accumulate=True)
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
