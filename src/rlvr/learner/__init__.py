"""The trainable side of a run, in one process: the policy learner (advantages, losses, optimizer), the critic,
the frozen log-prob model (reference), and one RL update on a step's groups."""

from rlvr.learner.critic import Critic, build_critic
from rlvr.learner.learner import Learner, algorithm_inputs, needs_reference, needs_teacher, needs_token_rm
from rlvr.learner.logprob_model import LocalLogProbModel, as_logprob_model
from rlvr.learner.step import LocalTrainable, learn_on, record_advantages

__all__ = [
    "Critic",
    "Learner",
    "LocalLogProbModel",
    "LocalTrainable",
    "algorithm_inputs",
    "as_logprob_model",
    "build_critic",
    "learn_on",
    "needs_reference",
    "needs_teacher",
    "needs_token_rm",
    "record_advantages",
]
