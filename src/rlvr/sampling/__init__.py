"""Which prompts go into a batch, how many samples each gets, and which groups reach the learner."""

from rlvr.sampling.base import SAMPLERS, BatchSampler, StepContext, UniformSampler
from rlvr.sampling.order import PromptSampler

__all__ = ["SAMPLERS", "BatchSampler", "PromptSampler", "StepContext", "UniformSampler"]
