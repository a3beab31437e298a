"""A run's roles (generator, scorer, log-prob model, trainable) and their placement, decided once from config."""

from rlvr.roles.placement import Roles, place_roles
from rlvr.roles.protocols import Generator, LogProbModel, RewardLearner, Scorer, Trainable

__all__ = ["Generator", "LogProbModel", "RewardLearner", "Roles", "Scorer", "Trainable", "place_roles"]
