r"""Policy losses, token by token, and how per-token losses are reduced to one number.

A loss returns a per-token loss [B, T] (zero where `mask` is 0 is not required; the reducer masks) and a dict
of per-token diagnostic tensors. The reduction is separate (`aggregate_loss`) so that gradient accumulation
over micro-batches divides by the mini-batch's totals, making the result independent of micro-batching.

Notation used in the docstrings: r_t = pi(a_t) / pi_old(a_t) is the token's importance ratio, A_t its
advantage, and sg[.] a stop-gradient (`detach`). Every ratio is formed from a log-ratio clamped to
[-20, 20], so `exp` cannot overflow for tokens far off-policy. `clipped` in the diagnostics marks tokens
whose gradient the loss removed (1.0) and is what the trainer logs as the clip fraction.

One family per module; importing this package imports them all, which registers every loss in `LOSSES`:

- `clipped.py`: clipped token-level surrogates: ppo_clip (+ clip-higher, dual-clip), dcpo, cpgd
- `sequence.py`: sequence-level ratio: gspo
- `entropy.py`: the entropy mechanism: clip_cov, kl_cov (and `token_covariance`); entropy_min (entropy
  minimisation, no reward)
- `supervised.py`: RLVR as supervised learning: pacs
- `token_terms.py`: token-level helpers a trainer composes with any loss: `top_entropy_mask` (train only the
  high-entropy minority), `entropy_bonus`, and `truncated_is_weights` (rollout-engine vs learner mismatch)
- `aggregate.py`: `aggregate_loss` (per-token loss to a scalar) and `masked_mean`
- `common.py`: the `LOSSES` registry, the bounded log-ratio and PPO's clipped surrogate
The off-policy guidance losses (luffy, sft_mix) are in `rlvr.algorithms.guidance`.
"""

from rlvr.algorithms.losses.aggregate import LossAggregation, aggregate_loss, masked_mean
from rlvr.algorithms.losses.clipped import cpgd_loss, dcpo_loss, dcpo_ratio_bounds, ppo_clip_loss
from rlvr.algorithms.losses.common import LOSSES
from rlvr.algorithms.losses.entropy import clip_cov_loss, entropy_min_loss, kl_cov_loss, token_covariance
from rlvr.algorithms.losses.sequence import gspo_loss
from rlvr.algorithms.losses.supervised import pacs_loss
from rlvr.algorithms.losses.token_terms import entropy_bonus, top_entropy_mask, truncated_is_weights

__all__ = [
    "LOSSES",
    "LossAggregation",
    "aggregate_loss",
    "clip_cov_loss",
    "cpgd_loss",
    "dcpo_loss",
    "dcpo_ratio_bounds",
    "entropy_bonus",
    "entropy_min_loss",
    "gspo_loss",
    "kl_cov_loss",
    "masked_mean",
    "pacs_loss",
    "ppo_clip_loss",
    "token_covariance",
    "top_entropy_mask",
    "truncated_is_weights",
]
