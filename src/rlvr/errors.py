"""Errors every layer may raise. The bottom layer: imports nothing from rlvr, so engines, trackers and the
runtime can raise a ConfigError without importing the config schema (`rlvr.config` re-exports it)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem. The message names the key, what was expected and what was got."""

    def __init__(self, problems: list[str] | str, source: str | None = None):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        head = f"Invalid configuration{f' in {source}' if source else ''}:"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


class RoleLost(RuntimeError):
    """A role's worker died and cannot be replaced in place (e.g. a Ray learner rank: the group's collectives
    cannot continue without it). The run stops; `rlvr train --resume` continues from the newest checkpoint."""
