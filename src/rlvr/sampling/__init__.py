"""Which prompts go into a batch, how many samples each gets, and which groups reach the learner.

Importing this package registers every batch sampler (`SAMPLERS`), the `reinforce_ada` advantage estimator,
and the agent turn-budget schedules (`TURN_BUDGETS`). See docs/sampling.md.
"""

from rlvr.sampling import adaptive, bandit, curriculum, distill, filters, guidance, pcl, search, tree  # noqa: F401  (register)
from rlvr.sampling.base import SAMPLERS, BatchSampler, StepContext, UniformSampler
from rlvr.sampling.curriculum import TURN_BUDGETS
from rlvr.sampling.order import PromptSampler

__all__ = ["SAMPLERS", "TURN_BUDGETS", "BatchSampler", "PromptSampler", "StepContext", "UniformSampler"]
