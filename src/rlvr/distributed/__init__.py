"""Placement of the stages on a Ray cluster: rollout-worker actors behind the engine interface.

Nothing here is imported unless `distributed.backend=ray` is chosen; Ray itself is an optional dependency.
"""
