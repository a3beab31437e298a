"""A run's roles (generator, scorer, log-prob model, trainable) and their placement, decided once from config."""

from rlvr.roles.placement import Roles, place_roles
from rlvr.roles.protocols import Generator, LogProbModel, Scorer, Trainable

__all__ = ["Generator", "LogProbModel", "Roles", "Scorer", "Trainable", "place_roles"]
