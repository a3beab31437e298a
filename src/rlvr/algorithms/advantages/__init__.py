"""Advantage estimators: pure functions from per-sample rewards (and group ids) to advantages.

Each estimator's positional parameters name the tensors it needs (see `rlvr.algorithms.inputs.ADVANTAGE_INPUTS`:
`rewards` [N], `group_ids` [N], `correct` [N], `mask` [N, T], ...) and it returns advantages [N] (one per sample)
or [N, T] (per token, zero outside the mask). Config parameters are keyword-only; they are bound once, at registry
lookup. Sums and statistics are taken in float64; no estimator returns NaN.

One family per module; importing this package imports them all, which registers every estimator in
`ADVANTAGES`:

- `group.py`: group-relative baselines: grpo, dr_grpo, rloo, lite_ppo
- `reinforce.py`: REINFORCE family: reinforce_pp, reinforce_pp_baseline, psr, nsr, w_reinforce
- `gae.py`: critic-based: gae (and `gae_returns`, the critic's targets)
- `reweighted.py`: GRPO reweighted per sample: grpo_lead (difficulty), ace (confidence), ear (entropy)
- `ktae.py`: per-token key-token values on top of GRPO: ktae
- `tree.py`: a search rollout's per-token tree advantages, passed through: tree
- `process.py`: process supervision from step rewards: process_grpo
- `oreal.py`: OREAL's token-level reward-model weights on a group baseline: oreal
- `common.py`: the `ADVANTAGES` registry, `group_stats` and the shared private helpers
"""

from rlvr.algorithms.advantages.common import ADVANTAGES, Discount, NonNegative, group_stats
from rlvr.algorithms.advantages.gae import gae_advantages, gae_returns
from rlvr.algorithms.advantages.group import (
    dr_grpo_advantages,
    group_normalized_advantages,
    lite_ppo_advantages,
    rloo_advantages,
)
from rlvr.algorithms.advantages.ktae import _fisher_exact_p, ktae_advantages
from rlvr.algorithms.advantages.oreal import oreal_advantages, oreal_token_weights
from rlvr.algorithms.advantages.process import normalized_step_returns, process_grpo_advantages
from rlvr.algorithms.advantages.reinforce import (
    nsr_advantages,
    psr_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    weighted_reinforce_advantages,
)
from rlvr.algorithms.advantages.reweighted import (
    ace_advantages,
    entropy_reshaped_advantages,
    grpo_lead_advantages,
)
from rlvr.algorithms.advantages.tree import tree_advantages

__all__ = [
    "ADVANTAGES",
    "Discount",
    "NonNegative",
    "_fisher_exact_p",
    "ace_advantages",
    "oreal_advantages",
    "oreal_token_weights",
    "dr_grpo_advantages",
    "entropy_reshaped_advantages",
    "gae_advantages",
    "gae_returns",
    "group_normalized_advantages",
    "group_stats",
    "grpo_lead_advantages",
    "ktae_advantages",
    "lite_ppo_advantages",
    "normalized_step_returns",
    "nsr_advantages",
    "process_grpo_advantages",
    "psr_advantages",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "rloo_advantages",
    "tree_advantages",
    "weighted_reinforce_advantages",
]
