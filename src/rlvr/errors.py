"""Errors every layer may raise, defined at the bottom so that no layer imports a higher one to raise them."""

from __future__ import annotations


class RoleLost(RuntimeError):
    """A role's worker died and cannot be replaced in place (e.g. a Ray learner rank: the group's collectives
    cannot continue without it). The run stops; `rlvr train --resume` continues from the newest checkpoint."""
